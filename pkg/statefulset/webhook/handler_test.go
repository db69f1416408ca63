package webhook

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/klog/v2"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/desired"
)

func TestHandler(t *testing.T) {
	logger := klog.Background()
	h := Handler{Logger: logger}
	r := update(t, sts(claim("data", "10Gi")), sts(claim("data", "20Gi")), "kubectl")
	pending := update(t, withAnnotations(sts(claim("data", "10Gi")), desired.Annotation, desire20),
		withAnnotations(replicasOnly(claim("data", "10Gi")), desired.Annotation, desire20), "kubectl")
	for _, tc := range []struct {
		name              string
		object, oldObject []byte
		wantPatch         bool
		wantWarning       string // "": none
	}{
		{"size change", r.Object, r.OldObject, true, recorded},
		{"no change", r.OldObject, r.OldObject, false, ""},
		{"a pending change kept: a warning without a patch", pending.Object, pending.OldObject, false, kept},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := mustJSON(t, map[string]any{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": map[string]any{
				"uid": "u-1", "operation": "UPDATE", "name": "web", "namespace": "ns", "dryRun": true,
				"resource": map[string]string{"group": "apps", "version": "v1", "resource": "statefulsets"},
				"object":   json.RawMessage(tc.object), "oldObject": json.RawMessage(tc.oldObject),
				"options": map[string]string{"kind": "PatchOptions", "fieldManager": "kubectl"},
			}})
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, Path, strings.NewReader(string(body))))
			if rec.Code != http.StatusOK {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			var review admissionv1.AdmissionReview
			if err := json.Unmarshal(rec.Body.Bytes(), &review); err != nil || review.Response == nil {
				t.Fatalf("answer %s: %v", rec.Body, err)
			}
			resp := review.Response
			if review.APIVersion != "admission.k8s.io/v1" || review.Kind != "AdmissionReview" || resp.UID != "u-1" || !resp.Allowed {
				t.Fatalf("answer %s: want an allowed AdmissionReview v1 for uid u-1", rec.Body)
			}
			if got := resp.Patch != nil; got != tc.wantPatch || (got && (resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch)) {
				t.Fatalf("answer %s: want a JSONPatch: %v", rec.Body, tc.wantPatch)
			}
			if tc.wantPatch && !strings.Contains(string(resp.Patch), "/spec/volumeClaimTemplates") {
				t.Fatalf("patch %s does not put the templates back", resp.Patch)
			}
			checkWarning(t, resp.Warnings, tc.wantWarning)
		})
	}
}

func TestHandlerBadRequests(t *testing.T) {
	logger := klog.Background()
	h := Handler{Logger: logger}
	for _, tc := range []struct {
		method, body string
		want         int
	}{
		{http.MethodGet, "", http.StatusMethodNotAllowed},
		{http.MethodPost, "{", http.StatusBadRequest},
		{http.MethodPost, `{"kind":"AdmissionReview"}`, http.StatusBadRequest},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tc.method, Path, strings.NewReader(tc.body)))
		if rec.Code != tc.want {
			t.Errorf("%s %q: status %d, want %d", tc.method, tc.body, rec.Code, tc.want)
		}
	}
}
