package policy

import (
	"math"
	"testing"
)

func TestParsePercent(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Percent
		ok   bool
	}{
		{"10%", 1000, true},
		{"0%", 0, true}, // parses; the range is the caller's
		{"7.5%", 750, true},
		{"7.25%", 725, true},
		{"1000%", 100000, true},
		{"9999.99%", 999999, true},
		{"10", 0, false},
		{"10 %", 0, false},
		{"-10%", 0, false},
		{"+10%", 0, false},
		{"10.%", 0, false},
		{".5%", 0, false},
		{"7.125%", 0, false},
		{"10000%", 0, false},
		{"1e1%", 0, false},
		{"%", 0, false},
		{"", 0, false},
		{"ten%", 0, false},
		{"１０%", 0, false}, // full-width digits
	} {
		got, ok := ParsePercent(tc.in)
		if ok != tc.ok || ok && got != tc.want {
			t.Errorf("ParsePercent(%q) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
		if ok {
			if back, _ := ParsePercent(got.String()); back != got {
				t.Errorf("ParsePercent(%q).String() = %q does not read back", tc.in, got.String())
			}
		}
	}
	for p, want := range map[Percent]string{1000: "10%", 750: "7.5%", 725: "7.25%", 5: "0.05%", 0: "0%"} {
		if got := p.String(); got != want {
			t.Errorf("Percent(%d).String() = %q, want %q", p, got, want)
		}
	}
}

func TestParseAmountAndBytes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Amount
		ok   bool
	}{
		{"10%", PercentAmount(1000), true},
		{"5Gi", BytesAmount(5 << 30), true},
		{"5G", BytesAmount(5e9), true},
		{"1.5Ki", BytesAmount(1536), true},
		{"100m", BytesAmount(1), true}, // a fraction of a byte rounds up, as for requests
		{"0", Amount{}, false},
		{"0Gi", Amount{}, false},
		{"-5Gi", Amount{}, false},
		{"ten", Amount{}, false},
		{"10E", Amount{}, false}, // above 2^63-1 bytes
		{"9223372036854775808", Amount{}, false},
		{"8Ei", BytesAmount(math.MaxInt64), true}, // apimachinery saturates a binary suffix at 2^63-1
		{"", Amount{}, false},
		{"5Gi%", Amount{}, false},
	} {
		got, ok := ParseAmount(tc.in)
		if ok != tc.ok || ok && got != tc.want {
			t.Errorf("ParseAmount(%q) = %+v, %v; want %+v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
	if got := BytesAmount(11 << 30).String(); got != "11Gi" {
		t.Errorf("BytesAmount(11Gi).String() = %q", got)
	}
}

func TestAmountOf(t *testing.T) {
	for _, tc := range []struct {
		a        Amount
		base     int64
		up, want int64
	}{
		{PercentAmount(1000), 10 << 30, 1, 1 << 30},
		{PercentAmount(1000), 15, 1, 2}, // 1.5 up
		{PercentAmount(1000), 15, 0, 1}, // 1.5 down
		{PercentAmount(1000), 0, 1, 0},  // nothing of nothing
		{BytesAmount(5 << 30), 1, 0, 5 << 30},
		{PercentAmount(100000), math.MaxInt64, 1, math.MaxInt64}, // 1000% of the largest saturates
	} {
		if got := tc.a.Of(tc.base, tc.up == 1); got != tc.want {
			t.Errorf("%s of %d (up %v) = %d, want %d", tc.a, tc.base, tc.up == 1, got, tc.want)
		}
	}
}

func TestRoundUpMiB(t *testing.T) {
	for in, want := range map[int64]int64{
		0: 0, 1: MiB, MiB: MiB, MiB + 1: 2 * MiB, 10e9: 9537 * MiB,
		math.MaxInt64/MiB*MiB + 1: math.MaxInt64, // no whole MiB above: saturates, never rounds down
		math.MaxInt64:             math.MaxInt64,
	} {
		if got := roundUpMiB(in); got != want {
			t.Errorf("roundUpMiB(%d) = %d, want %d", in, got, want)
		}
	}
}

func TestHumanAndShare(t *testing.T) {
	const gi = int64(1) << 30
	for _, tc := range []struct {
		n, scale int64
		want     string
	}{
		{gi*9/10 + 100, 10 * gi, "0.9Gi"},
		{gi*9/10 - 1, 10 * gi, "0.8Gi"}, // rounded down
		{10 * gi, 10 * gi, "10Gi"},
		{1536 << 20, 2 * gi, "1.5Gi"},
		{512 << 20, 512 << 20, "512Mi"},
		{100, 100, "100"},
		{0, 0, "0"},
	} {
		if got := human(tc.n, tc.scale); got != tc.want {
			t.Errorf("human(%d, %d) = %q, want %q", tc.n, tc.scale, got, tc.want)
		}
	}
	for _, tc := range []struct {
		part, whole int64
		want        string
	}{{9, 100, "9%"}, {999, 10000, "9.9%"}, {95, 1000, "9.5%"}, {1, 0, "?%"}, {100, 100, "100%"}} {
		if got := share(tc.part, tc.whole); got != tc.want {
			t.Errorf("share(%d, %d) = %q, want %q", tc.part, tc.whole, got, tc.want)
		}
	}
}
