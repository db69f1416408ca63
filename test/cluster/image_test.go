//go:build cluster

package cluster

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/csi-resizer/csi-resizer/test/framework"
)

// TestProductImageMatchesDockerfile assembles the product image offline the way the cluster
// imports it and checks it against what the Dockerfile says: the runtime stage's user,
// entrypoint, labels (with the build's version), the binaries it copies (static, stripped,
// reporting that version, at the Dockerfile's paths), and a base equivalent to distroless
// static nonroot (users and groups with nonroot 65532, CA certificates, /tmp, no shell).
func TestProductImageMatchesDockerfile(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	df, err := ParseDockerfile(string(text))
	if err != nil {
		t.Fatal(err)
	}
	tarball := BuildProductImage(t)
	img, err := ReadImage(tarball)
	if err != nil {
		t.Fatal(err)
	}
	if len(img.RepoTags) != 1 || !strings.HasPrefix(img.RepoTags[0], "csi-resizer:") {
		t.Fatalf("RepoTags %q, want one csi-resizer:<version>", img.RepoTags)
	}
	version := strings.TrimPrefix(img.RepoTags[0], "csi-resizer:")
	t.Logf("image %s from %s", img.RepoTags[0], tarball)

	if img.Config.User != df.User {
		t.Errorf("User %q, Dockerfile USER %q", img.Config.User, df.User)
	}
	if !reflect.DeepEqual(img.Config.Entrypoint, df.Entrypoint) {
		t.Errorf("Entrypoint %q, Dockerfile ENTRYPOINT %q", img.Config.Entrypoint, df.Entrypoint)
	}
	wantLabels := map[string]string{}
	for k, v := range df.Labels {
		wantLabels[k] = strings.ReplaceAll(v, "${VERSION}", version)
	}
	if !reflect.DeepEqual(img.Config.Labels, wantLabels) {
		t.Errorf("Labels\n  %v\nDockerfile LABEL (VERSION=%s)\n  %v", img.Config.Labels, version, wantLabels)
	}

	// The builder stage: static, stripped, trimmed, version stamped, every command.
	build := strings.Join(df.BuildCommands, "\n")
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", `-ldflags "-s -w -X main.version=${VERSION}"`, "./cmd/csi-resizer", "./cmd/statefulset-resizer", "./cmd/volume-autoscaler"} {
		if !strings.Contains(build, want) {
			t.Errorf("the Dockerfile's build no longer says %s: update hack/cluster/build-images.sh's build_product and this test\n%s", want, build)
		}
	}
	if len(df.Copies) != 3 {
		t.Errorf("Dockerfile copies %v into the runtime image, want the three binaries", df.Copies)
	}
	dir := t.TempDir()
	for _, c := range df.Copies {
		dst := c[1]
		h, ok := img.Files[dst]
		if !ok {
			t.Errorf("%s (COPY %s %s) missing from the image", dst, c[0], dst)
			continue
		}
		if h.Typeflag != tar.TypeReg || h.Mode&0o111 == 0 {
			t.Errorf("%s: type %c mode %o, want an executable file", dst, h.Typeflag, h.Mode)
		}
		f, err := elf.NewFile(bytes.NewReader(img.Content[dst]))
		if err != nil {
			t.Errorf("%s: not an ELF binary: %v", dst, err)
			continue
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s is dynamically linked (the runtime stage has no libc)", dst)
			}
		}
		if f.Section(".symtab") != nil {
			t.Errorf("%s has a symbol table: -ldflags -s missing", dst)
		}
		bin := filepath.Join(dir, filepath.Base(dst))
		if err := os.WriteFile(bin, img.Content[dst], 0o755); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bin, "--version").CombinedOutput()
		if err != nil || !strings.Contains(string(out), version) {
			t.Errorf("%s --version: %q (%v), want the image's version %s", dst, out, err, version)
		}
	}
	if df.Entrypoint != nil {
		if _, ok := img.Files[df.Entrypoint[0]]; !ok {
			t.Errorf("the entrypoint %s is not in the image", df.Entrypoint[0])
		}
	}

	// The base: what the runtime stage's FROM provides and the binaries rely on.
	if df.From != "gcr.io/distroless/static-debian12:nonroot" {
		t.Errorf("Dockerfile FROM %s: the offline base (build-images.sh base_files) stands for distroless static nonroot; check it still matches", df.From)
	}
	if !strings.Contains(string(img.Content["/etc/passwd"]), "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd has no nonroot user 65532:\n%s", img.Content["/etc/passwd"])
	}
	if !strings.Contains(string(img.Content["/etc/group"]), "nonroot:x:65532:") {
		t.Errorf("/etc/group has no nonroot group 65532:\n%s", img.Content["/etc/group"])
	}
	if h := img.Files["/tmp"]; h == nil || h.Typeflag != tar.TypeDir || h.Mode&0o7777 != 0o1777 {
		t.Errorf("/tmp: %+v, want a directory with mode 1777", h)
	}
	if h := img.Files["/home/nonroot"]; h == nil || h.Uid != 65532 || h.Gid != 65532 {
		t.Errorf("/home/nonroot: %+v, want a directory of 65532:65532", h)
	}
	if len(img.Content["/etc/ssl/certs/ca-certificates.crt"]) == 0 {
		t.Error("no CA certificates at /etc/ssl/certs/ca-certificates.crt")
	}
	if img.Config.WorkingDir != "/home/nonroot" {
		t.Errorf("WorkingDir %q, want distroless nonroot's /home/nonroot", img.Config.WorkingDir)
	}
	for _, sh := range []string{"/bin/sh", "/bin/busybox", "/bin/bash"} {
		if _, ok := img.Files[sh]; ok {
			t.Errorf("%s in the image: distroless has no shell", sh)
		}
	}
}

// TestParseDockerfile pins the parser on the constructs it must understand.
func TestParseDockerfile(t *testing.T) {
	df, err := ParseDockerfile(`# comment
ARG GO_VERSION=1.26
FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS builder
RUN CGO_ENABLED=0 go build \
      -o /out/ ./cmd/a
FROM base:tag
LABEL a="x y" \
      b="${VERSION}"
COPY --from=builder /out/a /a
USER 1:2
ENTRYPOINT ["/a", "--flag"]
`)
	if err != nil {
		t.Fatal(err)
	}
	want := &Dockerfile{
		From: "base:tag", User: "1:2", Entrypoint: []string{"/a", "--flag"},
		Labels:        map[string]string{"a": "x y", "b": "${VERSION}"},
		Copies:        [][2]string{{"/out/a", "/a"}},
		BuildCommands: []string{"CGO_ENABLED=0 go build -o /out/ ./cmd/a"},
	}
	if !reflect.DeepEqual(df, want) {
		t.Errorf("got %+v\nwant %+v", df, want)
	}
}
