package webhook

import (
	"fmt"
	"strings"
	"unicode"

	corev1 "k8s.io/api/core/v1"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/desired"
)

// Warnings go to the client in the admission response (kubectl and Helm print
// them as "Warning: ..."). The apiserver drops a warning that holds a control
// character (a newline, say) and, once a response's warnings pass 4096
// characters, cuts each to 256 (k8s.io/apiserver/pkg/endpoints/filters/warning.go):
// so one line each, a few templates named at most.

// maxListedTemplates is how many changed templates a warning names.
const maxListedTemplates = 3

// recordedWarning tells the client that its template change was taken as a
// desire (rule 9): what changes, what happens next and how to follow it; and,
// when it replaces a pending change (replaced, "" for none), which one, since
// what the request leaves at the live values is then no longer asked for.
func recordedWarning(ref string, live []corev1.PersistentVolumeClaim, ds []desired.Template, replaced string) string {
	changes := describeChanges(live, ds)
	if changes != "" {
		changes = " (" + changes + ")"
	}
	if replaced != "" {
		changes += ", replacing the pending change (" + replaced + ")"
	}
	return warning("statefulset-resizer: volume claim templates of %s change%s: statefulset-resizer re-creates the StatefulSet with them, keeping pods and PVCs; follow with `statefulset-resizer wait %s`",
		ref, changes, ref)
}

// keptWarning tells the client that its update keeps a pending change it did
// not re-state (rule 10), and how to undo that change.
func keptWarning(ref, changes string) string {
	return warning("statefulset-resizer: this update keeps the pending volume claim template change of %s (%s); to undo it, apply the templates you want after the re-create (`statefulset-resizer wait %s` tells when)",
		ref, changes, ref)
}

// notTakenWarning tells the client why a template change the webhook would
// otherwise take was left to the apiserver, whose answer does not say.
func notTakenWarning(ref string, err error) string {
	return warning("statefulset-resizer: the volume claim template change of %s is not taken: %v", ref, err)
}

// describeChanges names what ds changes in the live templates, per template:
// "data: 1Gi -> 2Gi, class gold -> silver, labels/annotations; logs: ...".
// It is "" when ds changes nothing.
func describeChanges(live []corev1.PersistentVolumeClaim, ds []desired.Template) string {
	byName := make(map[string]*corev1.PersistentVolumeClaim, len(live))
	for i := range live {
		byName[live[i].Name] = &live[i]
	}
	var listed []string
	more := 0
	for _, d := range ds {
		l, ok := byName[d.Name]
		if !ok {
			continue // desired.Apply refuses such a desire; the controller says so
		}
		parts := describeChange(l, d)
		switch {
		case len(parts) == 0:
		case len(listed) == maxListedTemplates:
			more++
		default:
			listed = append(listed, d.Name+": "+strings.Join(parts, ", "))
		}
	}
	if more > 0 {
		listed = append(listed, fmt.Sprintf("and %d more", more))
	}
	return strings.Join(listed, "; ")
}

// describeChange lists what d changes in the live template l.
func describeChange(l *corev1.PersistentVolumeClaim, d desired.Template) []string {
	var parts []string
	if q, ok := l.Spec.Resources.Requests[corev1.ResourceStorage]; !ok || q.Cmp(d.Storage) != 0 {
		from := "none"
		if ok {
			from = q.String()
		}
		parts = append(parts, from+" -> "+d.Storage.String())
	}
	if from, to := l.Spec.VolumeAttributesClassName, d.VolumeAttributesClassName; !(from == nil && to == nil || from != nil && to != nil && *from == *to) {
		parts = append(parts, "class "+className(from)+" -> "+className(to))
	}
	if m := d.Metadata; m != nil && (!sameMap(l.Labels, m.Labels) || !sameMap(l.Annotations, m.Annotations)) {
		parts = append(parts, "labels/annotations")
	}
	return parts
}

// warning formats one warning, with any control character (which would make
// the apiserver drop it) replaced by a space.
func warning(format string, args ...any) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(fmt.Sprintf(format, args...), "?"))
}
