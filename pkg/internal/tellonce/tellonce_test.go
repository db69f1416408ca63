package tellonce

import "testing"

func TestMemo(t *testing.T) {
	var m Memo
	steps := []struct {
		key, value string
		forget     bool
		want       bool
	}{
		{key: "a", value: "x", want: true},
		{key: "a", value: "x", want: false},
		{key: "b", value: "x", want: true},
		{key: "a", value: "y", want: true},
		{key: "a", value: "x", want: true},
		{key: "a", forget: true},
		{key: "a", value: "x", want: true},
	}
	for i, s := range steps {
		if s.forget {
			m.Forget(s.key)
			continue
		}
		if got := m.First(s.key, s.value); got != s.want {
			t.Errorf("step %d: First(%q, %q) = %v, want %v", i, s.key, s.value, got, s.want)
		}
	}
}
