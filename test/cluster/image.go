package cluster

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-resizer/csi-resizer/test/framework"
)

// Image is a container image read from a docker-archive tarball (hack/cluster/build-images.sh).
type Image struct {
	RepoTags []string
	Config   ImageConfig
	History  []struct {
		CreatedBy string `json:"created_by"`
	}
	// Files maps the absolute paths of the flattened file system to their tar headers; the
	// content of regular files is in Content.
	Files   map[string]*tar.Header
	Content map[string][]byte
}

// ImageConfig is the part of an image's config that the Dockerfile sets.
type ImageConfig struct {
	User       string            `json:"User"`
	Entrypoint []string          `json:"Entrypoint"`
	Cmd        []string          `json:"Cmd"`
	Env        []string          `json:"Env"`
	WorkingDir string            `json:"WorkingDir"`
	Labels     map[string]string `json:"Labels"`
}

// BuildProductImage assembles this checkout's image (hack/cluster/build-images.sh --product)
// and returns the tarball's path.
func BuildProductImage(t testing.TB) string {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", filepath.Join(root, "hack", "cluster", "build-images.sh"), "--product")
	cmd.Dir = root
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("build-images.sh --product: %v\n%s", err, tail(stderr.String(), 40))
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	return lines[len(lines)-1]
}

// ReadImage reads a docker-archive tarball with one image, layers applied in order
// (whiteouts honoured).
func ReadImage(file string) (*Image, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	entries := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		entries[h.Name] = b
	}
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(entries["manifest.json"], &manifest); err != nil {
		return nil, fmt.Errorf("manifest.json: %w", err)
	}
	if len(manifest) != 1 {
		return nil, fmt.Errorf("manifest.json: %d images, want 1", len(manifest))
	}
	img := &Image{RepoTags: manifest[0].RepoTags, Files: map[string]*tar.Header{}, Content: map[string][]byte{}}
	var cfg struct {
		Config  ImageConfig `json:"config"`
		History []struct {
			CreatedBy string `json:"created_by"`
		} `json:"history"`
	}
	if err := json.Unmarshal(entries[manifest[0].Config], &cfg); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	img.Config, img.History = cfg.Config, cfg.History
	for _, l := range manifest[0].Layers {
		if err := img.apply(entries[l]); err != nil {
			return nil, fmt.Errorf("layer %s: %w", l, err)
		}
	}
	return img, nil
}

func (img *Image) apply(layer []byte) error {
	var r io.Reader = bytes.NewReader(layer)
	if bytes.HasPrefix(layer, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return err
		}
		r = zr
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		p := path.Clean("/" + h.Name)
		if base := path.Base(p); strings.HasPrefix(base, ".wh.") {
			gone := path.Join(path.Dir(p), strings.TrimPrefix(base, ".wh."))
			for f := range img.Files {
				if f == gone || strings.HasPrefix(f, gone+"/") {
					delete(img.Files, f)
					delete(img.Content, f)
				}
			}
			continue
		}
		img.Files[p] = h
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				return err
			}
			img.Content[p] = b
		}
	}
}

// Dockerfile is what the runtime (last) stage of a Dockerfile says about the image.
type Dockerfile struct {
	From       string
	User       string
	Entrypoint []string
	Labels     map[string]string // values as written, ${VERSION} unexpanded
	// Copies are the destinations of the runtime stage's COPY instructions, in order, with
	// their sources.
	Copies [][2]string
	// BuildCommands are the RUN commands of the other stages.
	BuildCommands []string
}

// ParseDockerfile reads the instructions the image config depends on. It knows the subset of
// the syntax the project's Dockerfile uses: comments, line continuations, FROM, ARG, LABEL
// (key="value" pairs), COPY, RUN, USER, ENTRYPOINT (JSON form), WORKDIR.
func ParseDockerfile(text string) (*Dockerfile, error) {
	var lines []string
	var cur strings.Builder
	for _, raw := range strings.Split(text, "\n") {
		l := strings.TrimSpace(raw)
		if strings.HasPrefix(l, "#") || (l == "" && cur.Len() == 0) {
			continue
		}
		if strings.HasSuffix(l, "\\") {
			cur.WriteString(strings.TrimSpace(strings.TrimSuffix(l, "\\")) + " ")
			continue
		}
		cur.WriteString(l)
		lines = append(lines, cur.String())
		cur.Reset()
	}
	var stages [][]string
	for _, l := range lines {
		if strings.HasPrefix(strings.ToUpper(l), "FROM ") {
			stages = append(stages, nil)
		}
		if len(stages) > 0 {
			stages[len(stages)-1] = append(stages[len(stages)-1], l)
		}
	}
	if len(stages) == 0 {
		return nil, errors.New("no FROM")
	}
	d := &Dockerfile{Labels: map[string]string{}}
	for _, st := range stages[:len(stages)-1] {
		for _, l := range st {
			if k, rest := instruction(l); k == "RUN" {
				d.BuildCommands = append(d.BuildCommands, rest)
			}
		}
	}
	for _, l := range stages[len(stages)-1] {
		k, rest := instruction(l)
		switch k {
		case "FROM":
			f := strings.Fields(rest)
			d.From = f[len(f)-1]
			if i := indexOf(f, "AS"); i > 0 {
				d.From = f[i-1]
			}
		case "USER":
			d.User = rest
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(rest), &d.Entrypoint); err != nil {
				return nil, fmt.Errorf("ENTRYPOINT %s: only the JSON form is supported: %w", rest, err)
			}
		case "LABEL":
			kv, err := labelPairs(rest)
			if err != nil {
				return nil, fmt.Errorf("LABEL %s: %w", rest, err)
			}
			for k, v := range kv {
				d.Labels[k] = v
			}
		case "COPY":
			var args []string
			for _, f := range strings.Fields(rest) {
				if !strings.HasPrefix(f, "--") {
					args = append(args, f)
				}
			}
			if len(args) != 2 {
				return nil, fmt.Errorf("COPY %s: want one source and one destination", rest)
			}
			d.Copies = append(d.Copies, [2]string{args[0], args[1]})
		}
	}
	return d, nil
}

func instruction(l string) (string, string) {
	k, rest, _ := strings.Cut(l, " ")
	return strings.ToUpper(k), strings.TrimSpace(rest)
}

func indexOf(s []string, want string) int {
	for i, v := range s {
		if strings.EqualFold(v, want) {
			return i
		}
	}
	return -1
}

// labelPairs reads key="value" key2="value 2" ...
func labelPairs(s string) (map[string]string, error) {
	out := map[string]string{}
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimSpace(s) {
		k, rest, ok := strings.Cut(s, "=")
		if !ok || strings.ContainsAny(k, " \t") {
			return nil, fmt.Errorf("want key=value at %q", s)
		}
		if !strings.HasPrefix(rest, `"`) {
			v, after, _ := strings.Cut(rest, " ")
			out[k], s = v, after
			continue
		}
		end := strings.Index(rest[1:], `"`)
		if end < 0 {
			return nil, fmt.Errorf("unterminated quote at %q", rest)
		}
		out[k], s = rest[1:end+1], rest[end+2:]
	}
	return out, nil
}

// ProductImageID is the ID (config digest) containerd holds for the product image: the imageID
// the kubelet reports for a container that runs it. The product image is imported as
// csi-resizer:<tag>, which containerd keeps under docker.io/library/.
func (c *Cluster) ProductImageID(t testing.TB) string {
	t.Helper()
	ctr := []string{c.env["CTR"], "--address", c.env["CONTAINERD_SOCK"], "-n", "k8s.io"}
	for _, name := range []string{c.ProductImage, "docker.io/library/" + c.ProductImage} {
		out, err := c.InNode(t, append(ctr, "images", "ls", "name=="+name)...)
		if err != nil {
			t.Fatalf("ctr images ls name==%s: %v\n%s", name, err, out)
		}
		// The row of the image (REF TYPE DIGEST ...); ctr's warnings come first on stderr.
		var manifest string
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) >= 3 && f[0] == name {
				manifest = f[2]
			}
		}
		if manifest == "" {
			continue
		}
		body, err := c.InNode(t, append(ctr, "content", "get", manifest)...)
		if err != nil {
			t.Fatalf("ctr content get %s: %v\n%s", manifest, err, body)
		}
		var m struct {
			Config struct{ Digest string } `json:"config"`
		}
		if err := json.Unmarshal([]byte(body[strings.Index(body, "{"):]), &m); err != nil || m.Config.Digest == "" {
			t.Fatalf("manifest %s of %s: %v\n%s", manifest, name, err, body)
		}
		return m.Config.Digest
	}
	t.Fatalf("containerd holds no image %s", c.ProductImage)
	return ""
}

// RequireProductImage fails t unless every container named container in the pods of namespace
// ns matching selector runs the product image, by the imageID the kubelet reports (a name can
// be re-tagged; the ID is what runs).
func (c *Cluster) RequireProductImage(t testing.TB, ns, selector, container string) {
	t.Helper()
	want := c.ProductImageID(t)
	pods, err := c.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range pods.Items {
		for _, s := range p.Status.ContainerStatuses {
			if s.Name != container {
				continue
			}
			n++
			if s.ImageID != want && !strings.HasSuffix(s.ImageID, "@"+want) {
				t.Errorf("pod %s/%s container %s runs image ID %q (%s), not the product image %s (%s)", ns, p.Name, container, s.ImageID, s.Image, want, c.ProductImage)
			}
		}
	}
	if n == 0 {
		t.Errorf("no container %s in the pods of %s matching %q", container, ns, selector)
	}
}
