package policy

import (
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// MiB is the granularity of the sizes the autoscaler asks for (docs/autoscaler.md, "Step").
const MiB = int64(1) << 20

// Percent is a percentage in hundredths of a percent: 1050 is 10.5%. Integers keep the
// arithmetic exact and the parsing strict (no float rounding, no NaN).
type Percent int64

// ParsePercent reads "10%", "7.5%" or "7.25%": up to four integer digits and two decimals,
// no sign, no spaces. It does not check a range; callers do.
func ParsePercent(s string) (Percent, bool) {
	body, ok := strings.CutSuffix(s, "%")
	if !ok {
		return 0, false
	}
	whole, frac, hasFrac := strings.Cut(body, ".")
	if !digits(whole, 1, 4) || hasFrac && !digits(frac, 1, 2) {
		return 0, false
	}
	w, _ := strconv.ParseInt(whole, 10, 64) // 1-4 digits: cannot fail
	p := Percent(w * 100)
	if hasFrac {
		f, _ := strconv.ParseInt(frac, 10, 64)
		if len(frac) == 1 {
			f *= 10
		}
		p += Percent(f)
	}
	return p, true
}

func digits(s string, minLen, maxLen int) bool {
	if len(s) < minLen || len(s) > maxLen {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// String writes the percent the way ParsePercent reads it.
func (p Percent) String() string {
	w, f := int64(p)/100, int64(p)%100
	switch {
	case f == 0:
		return fmt.Sprintf("%d%%", w)
	case f%10 == 0:
		return fmt.Sprintf("%d.%d%%", w, f/10)
	}
	return fmt.Sprintf("%d.%02d%%", w, f)
}

// of returns p of n bytes (n >= 0), rounded up or down, saturated at MaxInt64.
func (p Percent) of(n int64, up bool) int64 {
	return mulDiv(n, int64(p), 100*100, up)
}

// mulDiv returns n*num/den without overflow (n, num >= 0, den > 0), saturated at MaxInt64.
func mulDiv(n, num, den int64, up bool) int64 {
	x := new(big.Int).Mul(big.NewInt(n), big.NewInt(num))
	d := big.NewInt(den)
	q, r := new(big.Int).QuoRem(x, d, new(big.Int))
	if up && r.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	if !q.IsInt64() {
		return math.MaxInt64
	}
	return q.Int64()
}

// Amount is either a percent of some size or an absolute number of bytes: the forms a
// threshold and a step take ("10%" or "5Gi").
type Amount struct {
	// IsPercent selects Percent over Bytes.
	IsPercent bool
	Percent   Percent
	Bytes     int64
}

// PercentAmount and BytesAmount build the two forms.
func PercentAmount(p Percent) Amount { return Amount{IsPercent: true, Percent: p} }

// BytesAmount is an absolute Amount.
func BytesAmount(b int64) Amount { return Amount{Bytes: b} }

// ParseAmount reads a percent ("10%") or a positive quantity ("5Gi").
func ParseAmount(s string) (Amount, bool) {
	if strings.HasSuffix(s, "%") {
		p, ok := ParsePercent(s)
		return PercentAmount(p), ok
	}
	b, ok := ParseBytes(s)
	return BytesAmount(b), ok
}

// Of returns the amount in bytes, taking a percent of base (base >= 0).
func (a Amount) Of(base int64, roundUp bool) int64 {
	if a.IsPercent {
		return a.Percent.of(base, roundUp)
	}
	return a.Bytes
}

// String writes the amount the way ParseAmount reads it.
func (a Amount) String() string {
	if a.IsPercent {
		return a.Percent.String()
	}
	return qstr(a.Bytes)
}

// qstr writes n bytes as a binary quantity.
func qstr(n int64) string {
	q := quantity(n)
	return q.String()
}

// maxQuantity is the largest size this package handles: bytes in an int64.
var maxQuantity = *resource.NewQuantity(math.MaxInt64, resource.BinarySI)

// ParseBytes reads a Kubernetes quantity that is above zero and fits in an int64 of bytes; a
// fraction of a byte is rounded up, as the apiserver does for a storage request.
func ParseBytes(s string) (int64, bool) {
	q, err := resource.ParseQuantity(s)
	if err != nil || q.Sign() <= 0 || q.Cmp(maxQuantity) > 0 {
		return 0, false
	}
	return q.Value(), true
}

// isZeroQuantity reports a quantity that parses and is zero ("0", "0Gi").
func isZeroQuantity(s string) bool {
	q, err := resource.ParseQuantity(s)
	return err == nil && q.IsZero()
}

// quantity is n bytes as a Quantity in the binary format ("11Gi", "11776Mi").
func quantity(n int64) resource.Quantity {
	return *resource.NewQuantity(n, resource.BinarySI)
}

// roundUpMiB rounds n up to a whole MiB; a size with no whole MiB above it in an int64 becomes
// MaxInt64, which the limit then clamps (rounding must never go down).
func roundUpMiB(n int64) int64 {
	if n > math.MaxInt64/MiB*MiB {
		return math.MaxInt64
	}
	return (n + MiB - 1) / MiB * MiB
}

// human writes n bytes in the binary unit of scale (the largest unit not above it) with at
// most one decimal, rounded down: "0.9Gi" of a 10Gi volume. For the sentences of decisions
// only; sizes that are written to objects use Quantity.
func human(n, scale int64) string {
	units := []string{"", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"}
	u, i := int64(1), 0
	for i < len(units)-1 && scale/u >= 1024 {
		u *= 1024
		i++
	}
	v := math.Floor(float64(n)/float64(u)*10) / 10
	s := strconv.FormatFloat(v, 'f', 1, 64)
	return strings.TrimSuffix(s, ".0") + units[i]
}

// share writes part/whole as a percent rounded down to a tenth: "9%", "9.5%".
func share(part, whole int64) string {
	if whole <= 0 {
		return "?%"
	}
	v := math.Floor(float64(part)/float64(whole)*1000) / 10
	return strings.TrimSuffix(strconv.FormatFloat(v, 'f', 1, 64), ".0") + "%"
}
