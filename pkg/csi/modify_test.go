package csi_test

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/csi-resizer/csi-resizer/pkg/csi"
	"github.com/csi-resizer/csi-resizer/test/csitest"
)

func TestModify(t *testing.T) {
	t.Parallel()
	srv := csitest.Start(t, csitest.Options{ControllerService: true, ControllerModify: true})
	client := csi.NewClient(dial(t, srv), 2*time.Second, 2*time.Second)
	var modifier csi.Modifier = client
	req := csi.ModifyRequest{VolumeID: "vol-1", MutableParameters: map[string]string{"iops": "3000"}, Secrets: map[string]string{"user": "u"}}

	t.Run("request", func(t *testing.T) {
		if err := modifier.Modify(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		calls := srv.ModifyCalls()
		got := calls[len(calls)-1].Request
		if got.GetVolumeId() != "vol-1" || !maps.Equal(got.GetMutableParameters(), req.MutableParameters) || !maps.Equal(got.GetSecrets(), req.Secrets) {
			t.Errorf("request = %v, want %+v", got, req)
		}
		if n := srv.Count(csitest.MethodControllerModifyVolume); n != len(calls) {
			t.Errorf("Count(ControllerModifyVolume) = %d, ModifyCalls = %d", n, len(calls))
		}
	})
	t.Run("error keeps its gRPC status", func(t *testing.T) {
		srv.QueueModify(csitest.Fail(codes.InvalidArgument, "iops out of range"))
		err := client.Modify(context.Background(), req)
		if st, ok := status.FromError(err); !ok || st.Code() != codes.InvalidArgument || st.Message() != "iops out of range" {
			t.Errorf("error = %v, want InvalidArgument \"iops out of range\"", err)
		}
		// The queue is used up: the default answer (OK) follows.
		if err := client.Modify(context.Background(), req); err != nil {
			t.Errorf("after the queue: %v", err)
		}
	})
	t.Run("driver slower than the timeout", func(t *testing.T) {
		srv.QueueModify(csitest.Response{Code: codes.OK, Delay: 10 * time.Second})
		if err := client.Modify(context.Background(), req); status.Code(err) != codes.DeadlineExceeded {
			t.Errorf("error = %v, want DeadlineExceeded (the 2s --timeout)", err)
		}
	})
}

func TestModifyUnsupported(t *testing.T) {
	t.Parallel()
	srv := csitest.Start(t, csitest.ControllerDriver())
	err := csi.NewClient(dial(t, srv), 2*time.Second, 2*time.Second).Modify(context.Background(), csi.ModifyRequest{VolumeID: "vol-1"})
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("error = %v, want Unimplemented from a driver without MODIFY_VOLUME", err)
	}
}

func secret(ns, name string, data map[string]string) *v1.Secret {
	s := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

func TestNewModifyRequest(t *testing.T) {
	claim := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "data"}}
	class := &storagev1.VolumeAttributesClass{
		ObjectMeta: metav1.ObjectMeta{Name: "gold"}, DriverName: "d", Parameters: map[string]string{"iops": "3000"},
	}
	modifyAnn := func(p *v1.PersistentVolume) {
		p.Annotations = map[string]string{csi.AnnModifySecretName: "modify", csi.AnnModifySecretNamespace: "secrets"}
	}
	expandRef := func(p *v1.PersistentVolume) {
		p.Spec.CSI.ControllerExpandSecretRef = &v1.SecretReference{Namespace: "secrets", Name: "expand"}
	}
	both := func(p *v1.PersistentVolume) { modifyAnn(p); expandRef(p) }
	inTree := func(p *v1.PersistentVolume) {
		p.Spec.CSI = nil
		p.Spec.AWSElasticBlockStore = &v1.AWSElasticBlockStoreVolumeSource{VolumeID: "aws://us-east-1a/vol-0abc"}
	}
	for _, tc := range []struct {
		name         string
		pv           *v1.PersistentVolume
		class        *storagev1.VolumeAttributesClass
		extra        bool
		wantHandle   string
		wantParams   map[string]string
		wantSecrets  map[string]string
		wantMigrated bool
		wantErr      []string // substrings of the error
	}{
		{name: "parameters, no secret", pv: pv(nil), class: class, wantHandle: "h", wantParams: map[string]string{"iops": "3000"}},
		{name: "extra metadata", pv: pv(nil), class: class, extra: true, wantHandle: "h", wantParams: map[string]string{
			"iops": "3000", csi.ParamPVCName: "data", csi.ParamPVCNamespace: "apps", csi.ParamPVName: "pv"}},
		{name: "extra metadata, class without parameters", pv: pv(nil), class: &storagev1.VolumeAttributesClass{DriverName: "d"}, extra: true,
			wantHandle: "h", wantParams: map[string]string{csi.ParamPVCName: "data", csi.ParamPVCNamespace: "apps", csi.ParamPVName: "pv"}},
		{name: "modify secret from the annotations wins over the expand secret", pv: pv(both), class: class, wantHandle: "h",
			wantParams: map[string]string{"iops": "3000"}, wantSecrets: map[string]string{"key": "modify"}},
		{name: "fallback to controllerExpandSecretRef", pv: pv(expandRef), class: class, wantHandle: "h",
			wantParams: map[string]string{"iops": "3000"}, wantSecrets: map[string]string{"key": "expand"}},
		{name: "one annotation alone falls back, as upstream", class: class, wantHandle: "h",
			pv: pv(func(p *v1.PersistentVolume) {
				expandRef(p)
				p.Annotations = map[string]string{csi.AnnModifySecretName: "modify"}
			}),
			wantParams: map[string]string{"iops": "3000"}, wantSecrets: map[string]string{"key": "expand"}},
		{name: "missing modify secret", class: class,
			pv: pv(func(p *v1.PersistentVolume) {
				p.Annotations = map[string]string{csi.AnnModifySecretName: "gone", csi.AnnModifySecretNamespace: "secrets"}
			}),
			wantErr: []string{"PV pv", "secrets/gone", csi.AnnModifySecretName}},
		{name: "missing expand secret", class: class,
			pv: pv(func(p *v1.PersistentVolume) {
				p.Spec.CSI.ControllerExpandSecretRef = &v1.SecretReference{Namespace: "secrets", Name: "gone"}
			}),
			wantErr: []string{"PV pv", "secrets/gone", "controllerExpandSecretRef"}},
		{name: "migrated in-tree PV: the translated handle", pv: pv(inTree), class: class, wantHandle: "vol-0abc",
			wantParams: map[string]string{"iops": "3000"}, wantMigrated: true},
		{name: "empty volume handle", pv: pv(func(p *v1.PersistentVolume) { p.Spec.CSI.VolumeHandle = "" }), class: class,
			wantErr: []string{"PV pv", "volumeHandle"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(
				secret("secrets", "modify", map[string]string{"key": "modify"}),
				secret("secrets", "expand", map[string]string{"key": "expand"}))
			classBefore := tc.class.DeepCopy()
			got, err := csi.NewModifyRequest(context.Background(), client.CoreV1(), tc.pv, claim, tc.class, tc.extra)
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("NewModifyRequest = %+v, want an error", got)
				}
				for _, want := range tc.wantErr {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not name %q", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.VolumeID != tc.wantHandle || got.Migrated != tc.wantMigrated {
				t.Errorf("volume %q migrated %v, want %q %v", got.VolumeID, got.Migrated, tc.wantHandle, tc.wantMigrated)
			}
			if !maps.Equal(got.MutableParameters, tc.wantParams) {
				t.Errorf("parameters = %v, want %v", got.MutableParameters, tc.wantParams)
			}
			if !maps.Equal(got.Secrets, tc.wantSecrets) {
				t.Errorf("secrets = %v, want %v", got.Secrets, tc.wantSecrets)
			}
			// The class is a shared informer object: the request's map is its own.
			if got.MutableParameters != nil {
				got.MutableParameters["iops"] = "changed"
			}
			if !maps.Equal(tc.class.Parameters, classBefore.Parameters) {
				t.Errorf("the class's parameters changed to %v", tc.class.Parameters)
			}
		})
	}
}

// TestCallDeadlines: each call has its own deadline (--resize-timeout, --modify-timeout): the
// same slow answer cuts an expansion with a short deadline and lets a modification with a long
// one finish.
func TestCallDeadlines(t *testing.T) {
	t.Parallel()
	srv := csitest.Start(t, csitest.Options{ControllerService: true, ControllerExpand: true, ControllerModify: true})
	client := csi.NewClient(dial(t, srv), 200*time.Millisecond, time.Minute)
	slow := csitest.Response{Code: codes.OK, Grant: true, Delay: time.Second}
	srv.Queue(slow)
	if _, err := client.Expand(context.Background(), csi.ExpandRequest{VolumeID: "vol-1", RequiredBytes: 1 << 30}); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("expansion slower than its deadline: error %v, want DeadlineExceeded", err)
	}
	srv.QueueModify(slow)
	if err := client.Modify(context.Background(), csi.ModifyRequest{VolumeID: "vol-1"}); err != nil {
		t.Errorf("modification as slow, within its longer deadline: %v, want success", err)
	}
}
