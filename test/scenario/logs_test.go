package scenario

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/csi-resizer/csi-resizer/test/framework"
)

// The "calling the driver" checks match the volume id whole: a test acting on volume "1" must
// not take another volume's call ("12", or a timestamp holding a 1) for its own.
func TestLoggedCallMatchesWholeValues(t *testing.T) {
	log := `I1125 10:27:14.237636   19123 modify.go:33] "Calling ControllerModifyVolume" pvc="ns/a" pv="ns-a" volumeID="12" class="gold"
I1125 10:27:14.237636   19123 expand.go:37] "Calling ControllerExpandVolume" pvc="ns/b" pv="ns-b" volumeID="3" requiredBytes=2147483648
{"ts":1,"msg":"Calling ControllerModifyVolume","volumeID":"7","class":"bronze"}
`
	path := filepath.Join(t.TempDir(), "resizer.log")
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &framework.Process{LogPath: path}
	for _, c := range []struct {
		got, want bool
		what      string
	}{
		{LoggedModifyCall(p, "12", "gold"), true, "modify 12 gold"},
		{LoggedModifyCall(p, "1", "gold"), false, "modify 1 gold (only 12 was called)"},
		{LoggedModifyCall(p, "12", "gol"), false, "modify 12 gol"},
		{LoggedModifyCall(p, "7", "bronze"), true, "modify 7 bronze (JSON)"},
		{LoggedExpandCall(p, "3"), true, "expand 3"},
		{LoggedExpandCall(p, "12"), false, "expand 12 (a modify call)"},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.what, c.got, c.want)
		}
	}
}
