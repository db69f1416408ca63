// Package fakeapi serves a small Kubernetes API over HTTP for unit tests,
// backed by client-go's testing.ObjectTracker and reaction chain (the same
// machinery as client-go's generated fake clientset). Tests get a real
// *kubernetes.Clientset and real informers talking HTTP, can inject errors
// with PrependReactor, and can inspect the requests with Actions.
//
// It exists because k8s.io/client-go/kubernetes/fake is not vendored in this
// module; it implements only what statefulset-resizer's tests need (get,
// list, watch, create, update, patch, delete of a few resources) and does no
// validation, defaulting or admission. It is for tests only.
package fakeapi

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	clienttesting "k8s.io/client-go/testing"
)

// resourceInfo describes one served resource.
type resourceInfo struct {
	gvk        schema.GroupVersionKind
	namespaced bool
}

var served = map[schema.GroupVersionResource]resourceInfo{
	corev1.SchemeGroupVersion.WithResource("pods"):                   {corev1.SchemeGroupVersion.WithKind("Pod"), true},
	corev1.SchemeGroupVersion.WithResource("persistentvolumeclaims"): {corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaim"), true},
	corev1.SchemeGroupVersion.WithResource("events"):                 {corev1.SchemeGroupVersion.WithKind("Event"), true},
	appsv1.SchemeGroupVersion.WithResource("statefulsets"):           {appsv1.SchemeGroupVersion.WithKind("StatefulSet"), true},
	storagev1.SchemeGroupVersion.WithResource("storageclasses"):      {storagev1.SchemeGroupVersion.WithKind("StorageClass"), false},
	coordinationv1.SchemeGroupVersion.WithResource("leases"):         {coordinationv1.SchemeGroupVersion.WithKind("Lease"), true},
}

var codec = scheme.Codecs.LegacyCodec(corev1.SchemeGroupVersion, appsv1.SchemeGroupVersion,
	storagev1.SchemeGroupVersion, coordinationv1.SchemeGroupVersion)

// Server is a running fake API server.
type Server struct {
	// Fake holds the reaction chains (PrependReactor to inject errors) and
	// records every request as an Action.
	*clienttesting.Fake
	// Tracker holds the objects; tests may Add/Update/Delete through it to
	// play other actors (changes are delivered to watches). Objects get a
	// resourceVersion, checked as a precondition on Update and Patch.
	Tracker clienttesting.ObjectTracker

	http *httptest.Server
	done chan struct{}
	once sync.Once
}

// New starts a server holding objects and stops it when the test ends.
func New(t testing.TB, objects ...runtime.Object) *Server {
	t.Helper()
	tracker := &versioningTracker{ObjectTracker: clienttesting.NewObjectTracker(scheme.Scheme, scheme.Codecs.UniversalDecoder())}
	for _, obj := range objects {
		if err := tracker.Add(obj); err != nil {
			t.Fatalf("fakeapi: add %T: %v", obj, err)
		}
	}
	s := &Server{Fake: &clienttesting.Fake{}, Tracker: tracker, done: make(chan struct{})}
	s.AddReactor("*", "*", clienttesting.ObjectReaction(tracker))
	s.AddWatchReactor("*", func(action clienttesting.Action) (bool, watch.Interface, error) {
		wa := action.(clienttesting.WatchActionImpl)
		opts := metav1.ListOptions{ResourceVersion: wa.WatchRestrictions.ResourceVersion}
		w, err := tracker.Watch(action.GetResource(), action.GetNamespace(), opts)
		return true, w, err
	})
	s.http = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

// Close stops open watches and the server. It is safe to call twice.
func (s *Server) Close() {
	s.once.Do(func() {
		close(s.done)
		s.http.CloseClientConnections()
		s.http.Close()
	})
}

// Config returns a client configuration for the server, without client-side
// rate limiting.
func (s *Server) Config() *rest.Config {
	return &rest.Config{Host: s.http.URL, QPS: 1000, Burst: 1000,
		ContentConfig: rest.ContentConfig{ContentType: runtime.ContentTypeJSON}}
}

// Clientset returns a real clientset talking to the server.
func (s *Server) Clientset(t testing.TB) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(s.Config())
	if err != nil {
		t.Fatalf("fakeapi: clientset: %v", err)
	}
	return c
}

// ActionsFor returns the recorded actions with the given verb and resource.
func (s *Server) ActionsFor(verb, resource string) []clienttesting.Action {
	var out []clienttesting.Action
	for _, a := range s.Actions() {
		if a.GetVerb() == verb && a.GetResource().Resource == resource {
			out = append(out, a)
		}
	}
	return out
}

// request is a parsed API path.
type request struct {
	gvr         schema.GroupVersionResource
	info        resourceInfo
	namespace   string
	name        string
	subresource string
}

func parsePath(path string) (*request, error) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	var gv schema.GroupVersion
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		gv, parts = schema.GroupVersion{Version: parts[1]}, parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		gv, parts = schema.GroupVersion{Group: parts[1], Version: parts[2]}, parts[3:]
	default:
		return nil, fmt.Errorf("unsupported path %q", path)
	}
	r := &request{}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		r.namespace, parts = parts[1], parts[2:]
	}
	if len(parts) == 0 || len(parts) > 3 {
		return nil, fmt.Errorf("unsupported path %q", path)
	}
	r.gvr = gv.WithResource(parts[0])
	if len(parts) > 1 {
		r.name = parts[1]
	}
	if len(parts) > 2 {
		r.subresource = parts[2]
	}
	info, ok := served[r.gvr]
	if !ok {
		return nil, fmt.Errorf("resource %s is not served", r.gvr)
	}
	r.info = info
	return r, nil
}

func (s *Server) serve(w http.ResponseWriter, req *http.Request) {
	r, err := parsePath(req.URL.Path)
	if err != nil {
		writeError(w, apierrors.NewNotFound(schema.GroupResource{Resource: req.URL.Path}, ""))
		return
	}
	query := req.URL.Query()
	var action clienttesting.Action
	switch req.Method {
	case http.MethodGet:
		switch {
		case r.name != "":
			action = clienttesting.NewGetSubresourceAction(r.gvr, r.namespace, r.subresource, r.name)
		case query.Get("watch") == "true" || query.Get("watch") == "1":
			if query.Get("sendInitialEvents") == "true" {
				// Streaming lists are not implemented: the reflector falls
				// back to list + watch on this error.
				writeError(w, apierrors.NewBadRequest("fakeapi: sendInitialEvents is not supported"))
				return
			}
			s.serveWatch(w, req, clienttesting.NewWatchAction(r.gvr, r.namespace,
				metav1.ListOptions{ResourceVersion: query.Get("resourceVersion")}))
			return
		default:
			action = clienttesting.NewListAction(r.gvr, r.info.gvk, r.namespace, metav1.ListOptions{})
		}
	case http.MethodPost, http.MethodPut:
		obj, err := decodeBody(req)
		if err != nil {
			writeError(w, apierrors.NewBadRequest(err.Error()))
			return
		}
		if req.Method == http.MethodPost {
			action = clienttesting.NewCreateAction(r.gvr, r.namespace, obj)
		} else {
			action = clienttesting.NewUpdateSubresourceAction(r.gvr, r.subresource, r.namespace, obj)
		}
	case http.MethodPatch:
		data, err := io.ReadAll(req.Body)
		if err != nil {
			writeError(w, apierrors.NewBadRequest(err.Error()))
			return
		}
		pt := types.PatchType(strings.Split(req.Header.Get("Content-Type"), ";")[0])
		if r.subresource != "" {
			action = clienttesting.NewPatchSubresourceAction(r.gvr, r.namespace, r.name, pt, data, r.subresource)
		} else {
			action = clienttesting.NewPatchAction(r.gvr, r.namespace, r.name, pt, data)
		}
	case http.MethodDelete:
		action = clienttesting.NewDeleteAction(r.gvr, r.namespace, r.name)
	default:
		writeError(w, apierrors.NewMethodNotSupported(r.gvr.GroupResource(), req.Method))
		return
	}
	obj, err := s.Invokes(action, nil)
	if err != nil {
		writeError(w, err)
		return
	}
	if obj == nil && req.Method == http.MethodDelete {
		// client-go's tracker returns no object for a delete.
		obj = &metav1.Status{Status: metav1.StatusSuccess}
	}
	if obj == nil {
		writeError(w, apierrors.NewInternalError(fmt.Errorf("fakeapi: no reactor returned an object for %v", action)))
		return
	}
	code := http.StatusOK
	if req.Method == http.MethodPost {
		code = http.StatusCreated
	}
	writeObject(w, code, obj)
}

func (s *Server) serveWatch(w http.ResponseWriter, req *http.Request, action clienttesting.WatchActionImpl) {
	watcher, err := s.InvokesWatch(action)
	if err != nil {
		writeError(w, err)
		return
	}
	defer watcher.Stop()
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeError(w, apierrors.NewInternalError(fmt.Errorf("fakeapi: streaming unsupported")))
		return
	}
	w.Header().Set("Content-Type", runtime.ContentTypeJSON)
	w.WriteHeader(http.StatusOK)
	flusher.Flush()
	for {
		select {
		case <-s.done:
			return
		case <-req.Context().Done():
			return
		case ev, ok := <-watcher.ResultChan():
			if !ok {
				return
			}
			raw, err := runtime.Encode(codec, ev.Object)
			if err != nil {
				return
			}
			line, err := json.Marshal(metav1.WatchEvent{Type: string(ev.Type), Object: runtime.RawExtension{Raw: raw}})
			if err != nil {
				return
			}
			if _, err := w.Write(append(line, '\n')); err != nil {
				return
			}
			flusher.Flush()
		}
	}
}

func decodeBody(req *http.Request) (runtime.Object, error) {
	data, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(data, nil, nil)
	return obj, err
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

func writeObject(w http.ResponseWriter, code int, obj runtime.Object) {
	data, err := runtime.Encode(codec, obj)
	if err != nil {
		writeError(w, apierrors.NewInternalError(err))
		return
	}
	w.Header().Set("Content-Type", runtime.ContentTypeJSON)
	w.WriteHeader(code)
	_, _ = w.Write(data)
}

func writeError(w http.ResponseWriter, err error) {
	var status metav1.Status
	if apiStatus, ok := err.(apierrors.APIStatus); ok {
		status = apiStatus.Status()
	} else {
		status = apierrors.NewInternalError(err).Status()
	}
	status.Kind, status.APIVersion = "Status", "v1"
	data, _ := json.Marshal(status)
	w.Header().Set("Content-Type", runtime.ContentTypeJSON)
	code := int(status.Code)
	if code == 0 {
		code = http.StatusInternalServerError
	}
	w.WriteHeader(code)
	_, _ = w.Write(data)
}
