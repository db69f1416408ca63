package webhook

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"k8s.io/klog/v2"
)

// The AdmissionReview v1 wire format (admission.k8s.io/v1), the fields this
// webhook reads and writes. k8s.io/api/admission/v1 is not in vendor/; these
// mirror its JSON names, so that switching to it changes only this block.
type admissionReview struct {
	APIVersion string             `json:"apiVersion"`
	Kind       string             `json:"kind"`
	Request    *admissionRequest  `json:"request,omitempty"`
	Response   *admissionResponse `json:"response,omitempty"`
}

type admissionRequest struct {
	UID         string          `json:"uid"`
	Resource    groupVersionRes `json:"resource"`
	SubResource string          `json:"subResource,omitempty"`
	Name        string          `json:"name,omitempty"`
	Namespace   string          `json:"namespace,omitempty"`
	Operation   string          `json:"operation"`
	UserInfo    struct {
		Username string `json:"username"`
	} `json:"userInfo"`
	Object    json.RawMessage `json:"object,omitempty"`
	OldObject json.RawMessage `json:"oldObject,omitempty"`
	DryRun    *bool           `json:"dryRun,omitempty"`
	Options   json.RawMessage `json:"options,omitempty"`
}

type groupVersionRes struct {
	Group    string `json:"group"`
	Version  string `json:"version"`
	Resource string `json:"resource"`
}

type admissionResponse struct {
	UID       string  `json:"uid"`
	Allowed   bool    `json:"allowed"`
	PatchType *string `json:"patchType,omitempty"`
	Patch     []byte  `json:"patch,omitempty"`
}

// maxReviewBytes bounds the request body: two objects of at most the
// apiserver's request size limit (3 MiB) plus the envelope.
const maxReviewBytes = 7 << 20

// Handler serves the webhook: it answers every AdmissionReview v1 with
// allowed, and with the JSON patch of Decide when there is one.
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
	var review admissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		http.Error(w, fmt.Sprintf("not an AdmissionReview with a request: %v", err), http.StatusBadRequest)
		return
	}
	resp := h.review(review.Request)
	out, err := json.Marshal(admissionReview{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview", Response: resp})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

// review decides one request; the answer is always allowed.
func (h Handler) review(req *admissionRequest) *admissionResponse {
	var options struct {
		FieldManager string `json:"fieldManager"`
	}
	_ = json.Unmarshal(req.Options, &options) // absent or foreign options: no field manager
	d := Decide(Request{
		Operation: req.Operation,
		Group:     req.Resource.Group, Version: req.Resource.Version, Resource: req.Resource.Resource, SubResource: req.SubResource,
		Object: req.Object, OldObject: req.OldObject,
		FieldManager: options.FieldManager,
	})
	resp := &admissionResponse{UID: req.UID, Allowed: true}
	logger := h.Logger.WithValues("statefulset", klog.KRef(req.Namespace, req.Name), "user", req.UserInfo.Username, "dryRun", req.DryRun != nil && *req.DryRun)
	if d.Patch == nil {
		logger.V(4).Info("StatefulSet update left as it is", "reason", d.Reason)
		return resp
	}
	jsonPatch := "JSONPatch"
	resp.PatchType, resp.Patch = &jsonPatch, d.Patch
	logger.Info("Mutating StatefulSet update", "reason", d.Reason, "from", d.From, "to", d.To, "fieldManager", options.FieldManager)
	return resp
}
