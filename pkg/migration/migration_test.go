package migration

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

func claim(resizer string) *v1.PersistentVolumeClaim {
	pvc := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "data"}}
	if resizer != "" {
		pvc.Annotations = map[string]string{AnnStorageResizer: resizer}
	}
	return pvc
}

func volume(src v1.PersistentVolumeSource) *v1.PersistentVolume {
	block := v1.PersistentVolumeBlock
	return &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-1", Labels: map[string]string{v1.LabelTopologyZone: "us-central1-a"}},
		Spec: v1.PersistentVolumeSpec{
			PersistentVolumeSource: src,
			AccessModes:            []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			VolumeMode:             &block,
			MountOptions:           []string{"noatime"},
			ClaimRef:               &v1.ObjectReference{Namespace: "ns", Name: "data"},
		},
	}
}

var (
	ebs      = v1.PersistentVolumeSource{AWSElasticBlockStore: &v1.AWSElasticBlockStoreVolumeSource{VolumeID: "aws://us-east-1a/vol-0abc", FSType: "xfs"}}
	gce      = v1.PersistentVolumeSource{GCEPersistentDisk: &v1.GCEPersistentDiskVolumeSource{PDName: "disk-1", FSType: "ext4"}}
	azDisk   = v1.PersistentVolumeSource{AzureDisk: &v1.AzureDiskVolumeSource{DiskName: "d", DataDiskURI: "/subscriptions/x/disks/d"}}
	azFile   = v1.PersistentVolumeSource{AzureFile: &v1.AzureFilePersistentVolumeSource{SecretName: "azure-secret", ShareName: "share"}}
	cinder   = v1.PersistentVolumeSource{Cinder: &v1.CinderPersistentVolumeSource{VolumeID: "c-1", FSType: "ext4"}}
	vsphere  = v1.PersistentVolumeSource{VsphereVolume: &v1.VsphereVirtualDiskVolumeSource{VolumePath: "[ds] vol.vmdk", FSType: "ext4"}}
	portworx = v1.PersistentVolumeSource{PortworxVolume: &v1.PortworxVolumeSource{VolumeID: "pw-1", FSType: "ext4"}}
	nfs      = v1.PersistentVolumeSource{NFS: &v1.NFSVolumeSource{Server: "s", Path: "/p"}}
	csiOwn   = v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: "ebs.csi.aws.com", VolumeHandle: "vol-1"}}
	csiOther = v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: "other.csi.io", VolumeHandle: "vol-1"}}
)

func TestOwns(t *testing.T) {
	for _, tc := range []struct {
		name    string
		driver  string
		resizer string
		src     v1.PersistentVolumeSource
		want    bool
	}{
		{"CSI PV of the driver", "ebs.csi.aws.com", "", csiOwn, true},
		{"CSI PV of another driver", "ebs.csi.aws.com", "ebs.csi.aws.com", csiOther, false},
		{"CSI PV of a non-migrated driver", "other.csi.io", "", csiOther, true},
		{"EBS PV, annotation names the driver", "ebs.csi.aws.com", "ebs.csi.aws.com", ebs, true},
		{"EBS PV without the annotation (kube-controller-manager has not handed it over)", "ebs.csi.aws.com", "", ebs, false},
		{"EBS PV, annotation names the in-tree plugin", "ebs.csi.aws.com", "kubernetes.io/aws-ebs", ebs, false},
		{"EBS PV, annotation names another driver", "ebs.csi.aws.com", "pd.csi.storage.gke.io", ebs, false},
		{"GCE PD PV, annotation names the EBS driver", "ebs.csi.aws.com", "ebs.csi.aws.com", gce, false},
		{"GCE PD", "pd.csi.storage.gke.io", "pd.csi.storage.gke.io", gce, true},
		{"Azure Disk", "disk.csi.azure.com", "disk.csi.azure.com", azDisk, true},
		{"Azure File", "file.csi.azure.com", "file.csi.azure.com", azFile, true},
		{"Cinder", "cinder.csi.openstack.org", "cinder.csi.openstack.org", cinder, true},
		{"vSphere", "csi.vsphere.vmware.com", "csi.vsphere.vmware.com", vsphere, true},
		{"Portworx", "pxd.portworx.com", "pxd.portworx.com", portworx, true},
		{"NFS has no CSI replacement", "ebs.csi.aws.com", "ebs.csi.aws.com", nfs, false},
		{"annotation naming a driver that replaces no plugin", "other.csi.io", "other.csi.io", ebs, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Owns(tc.driver, claim(tc.resizer), volume(tc.src)); got != tc.want {
				t.Errorf("Owns(%s) = %v, want %v", tc.driver, got, tc.want)
			}
		})
	}
}

func TestCSIView(t *testing.T) {
	for _, tc := range []struct {
		name       string
		src        v1.PersistentVolumeSource
		wantDriver string
		wantHandle string
		wantFSType string
	}{
		{"EBS: the aws:// URL becomes the bare volume id", ebs, "ebs.csi.aws.com", "vol-0abc", "xfs"},
		{"GCE PD: the zone comes from the PV's labels", gce, "pd.csi.storage.gke.io", "projects/UNSPECIFIED/zones/us-central1-a/disks/disk-1", "ext4"},
		{"Azure Disk", azDisk, "disk.csi.azure.com", "/subscriptions/x/disks/d", ""},
		{"Azure File: the handle names the PV and the claim's namespace", azFile, "file.csi.azure.com", "#azure-secret#share#pv-1#ns", ""},
		{"Cinder", cinder, "cinder.csi.openstack.org", "c-1", "ext4"},
		{"vSphere", vsphere, "csi.vsphere.vmware.com", "[ds] vol.vmdk", "ext4"},
		{"Portworx", portworx, "pxd.portworx.com", "pw-1", "ext4"},
		{"a CSI PV is its own view", csiOwn, "ebs.csi.aws.com", "vol-1", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pv := volume(tc.src)
			before := pv.DeepCopy()
			view, migrated, err := CSIView(klog.Background(), pv)
			if err != nil {
				t.Fatal(err)
			}
			if migrated != (tc.src.CSI == nil) {
				t.Errorf("migrated = %v for source %+v", migrated, tc.src)
			}
			c := view.Spec.CSI
			if c.Driver != tc.wantDriver || c.VolumeHandle != tc.wantHandle || c.FSType != tc.wantFSType {
				t.Errorf("CSI view = driver %q handle %q fsType %q, want %q %q %q", c.Driver, c.VolumeHandle, c.FSType, tc.wantDriver, tc.wantHandle, tc.wantFSType)
			}
			// What the volume capability is built from survives the translation.
			if *view.Spec.VolumeMode != v1.PersistentVolumeBlock || view.Spec.AccessModes[0] != v1.ReadWriteOnce || view.Spec.MountOptions[0] != "noatime" {
				t.Errorf("translation lost the PV's mode, access modes or mount options: %+v", view.Spec)
			}
			if c.ControllerExpandSecretRef != nil {
				t.Errorf("controller-expand secret %+v: no in-tree plugin has one", c.ControllerExpandSecretRef)
			}
			if !apiequality.Semantic.DeepEqual(pv, before) {
				t.Errorf("CSIView modified the PV")
			}
		})
	}
}

func TestCSIViewMalformedSource(t *testing.T) {
	pv := volume(v1.PersistentVolumeSource{AWSElasticBlockStore: &v1.AWSElasticBlockStoreVolumeSource{VolumeID: "aws://us-east-1a/not-a-volume"}})
	_, _, err := CSIView(klog.Background(), pv)
	if err == nil {
		t.Fatal("no error for an EBS URL without a vol- id")
	}
	if want := "PV pv-1"; !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "fix the PV's source") {
		t.Errorf("error %q does not name the PV and the fix", err)
	}
}

func TestIsMigratedDriver(t *testing.T) {
	for driver, want := range map[string]bool{
		"ebs.csi.aws.com": true, "pd.csi.storage.gke.io": true, "disk.csi.azure.com": true, "file.csi.azure.com": true,
		"cinder.csi.openstack.org": true, "csi.vsphere.vmware.com": true, "pxd.portworx.com": true,
		"hostpath.csi.k8s.io": false, "kubernetes.io/aws-ebs": false,
	} {
		if got := IsMigratedDriver(driver); got != want {
			t.Errorf("IsMigratedDriver(%q) = %v, want %v", driver, got, want)
		}
	}
}

func TestHasInTreeSource(t *testing.T) {
	if !HasInTreeSource(volume(ebs)) || HasInTreeSource(volume(csiOwn)) || HasInTreeSource(volume(nfs)) {
		t.Error("HasInTreeSource: want true for EBS only")
	}
}
