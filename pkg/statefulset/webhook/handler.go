package webhook

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// maxReviewBytes bounds the request body: two objects of at most the
// apiserver's request size limit (3 MiB) plus the envelope.
const maxReviewBytes = 7 << 20

// Handler serves the webhook: it answers every AdmissionReview v1 with
// allowed, with the JSON patch of Decide when there is one, and with its
// warnings.
type Handler struct {
	Logger klog.Logger
}

func (h Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST an AdmissionReview v1", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxReviewBytes+1))
	if err != nil || len(body) > maxReviewBytes {
		http.Error(w, fmt.Sprintf("reading the AdmissionReview: too large or %v", err), http.StatusBadRequest)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		http.Error(w, fmt.Sprintf("not an AdmissionReview with a request: %v", err), http.StatusBadRequest)
		return
	}
	resp := h.review(review.Request)
	out, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"}, Response: resp})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

// review decides one request; the answer is always allowed.
func (h Handler) review(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	var options struct {
		FieldManager string `json:"fieldManager"`
	}
	_ = json.Unmarshal(req.Options.Raw, &options) // absent or foreign options: no field manager
	d := Decide(Request{
		Operation: string(req.Operation),
		Group:     req.Resource.Group, Version: req.Resource.Version, Resource: req.Resource.Resource, SubResource: req.SubResource,
		Object: req.Object.Raw, OldObject: req.OldObject.Raw,
		FieldManager: options.FieldManager,
	})
	resp := &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true, Warnings: d.Warnings}
	logger := h.Logger.WithValues("statefulset", klog.KRef(req.Namespace, req.Name), "user", req.UserInfo.Username, "dryRun", req.DryRun != nil && *req.DryRun,
		"fieldManager", options.FieldManager)
	if d.Patch == nil {
		level := 4 // every update of an opted-in StatefulSet
		if len(d.Warnings) > 0 {
			level = 2 // a desire kept or a change not taken: the user was told, so is the log
		}
		logger.V(level).Info("StatefulSet update left as it is", "reason", d.Reason, "warnings", d.Warnings)
		return resp
	}
	jsonPatch := admissionv1.PatchTypeJSONPatch
	resp.PatchType, resp.Patch = &jsonPatch, d.Patch
	logger.Info("Mutating StatefulSet update", "reason", d.Reason, "from", d.From, "to", d.To, "warnings", d.Warnings)
	return resp
}
