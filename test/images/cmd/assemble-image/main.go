// Command assemble-image writes a container image as a docker-archive tarball (what `docker
// save` writes and `ctr images import` reads) from files of this machine, without a registry,
// a Docker engine or a base image to pull: the one-node cluster (hack/cluster) imports its
// images from these tarballs.
//
// Layers and their entries come in the order given on the command line:
//
//	assemble-image --tag registry.k8s.io/pause:3.10.2 --out pause.tar \
//	  --entrypoint '["/pause"]' --user 65535:65535 \
//	  --layer 'COPY pause /pause' --file /pause=bin/pause,mode=0755
//
//	--layer TEXT        starts a layer (TEXT is its history entry, as `docker history` shows)
//	--file DST=SRC[,mode=0644][,uid=0][,gid=0]   a regular file with SRC's content
//	--dir DST[,mode=0755][,uid=0][,gid=0]        a directory
//	--symlink DST=TARGET                         a symbolic link
//
// Parent directories missing from a layer are added (0755, root). Every entry gets the same
// time (--created, default SOURCE_DATE_EPOCH or the epoch) and no user names, so the same
// inputs give the same image digest.
package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// entry is one item of a layer.
type entry struct {
	kind     byte // tar.TypeReg, tar.TypeDir, tar.TypeSymlink
	dst      string
	src      string // file content, for TypeReg
	target   string // for TypeSymlink
	mode     int64
	uid, gid int
}

type layer struct {
	createdBy string
	entries   []entry
}

// spec collects --layer, --file, --dir and --symlink in command-line order.
type spec struct {
	layers []*layer
}

func (s *spec) current() (*layer, error) {
	if len(s.layers) == 0 {
		return nil, errors.New("--file, --dir and --symlink need a --layer before them")
	}
	return s.layers[len(s.layers)-1], nil
}

type specFlag struct {
	s    *spec
	kind string
}

func (f specFlag) String() string { return "" }

func (f specFlag) Set(v string) error {
	if f.kind == "layer" {
		f.s.layers = append(f.s.layers, &layer{createdBy: v})
		return nil
	}
	l, err := f.s.current()
	if err != nil {
		return err
	}
	e, err := parseEntry(f.kind, v)
	if err != nil {
		return fmt.Errorf("--%s %q: %w", f.kind, v, err)
	}
	l.entries = append(l.entries, e)
	return nil
}

// parseEntry reads DST[=SRC][,key=value...].
func parseEntry(kind, v string) (entry, error) {
	fields := strings.Split(v, ",")
	dst, rhs, hasRHS := strings.Cut(fields[0], "=")
	if !path.IsAbs(dst) {
		return entry{}, errors.New("the path in the image must be absolute")
	}
	e := entry{dst: path.Clean(dst), mode: -1}
	switch kind {
	case "file":
		if !hasRHS || rhs == "" {
			return entry{}, errors.New("want DST=SRC")
		}
		e.kind, e.src = tar.TypeReg, rhs
	case "dir":
		if hasRHS {
			return entry{}, errors.New("a directory has no source")
		}
		e.kind = tar.TypeDir
	case "symlink":
		if !hasRHS || rhs == "" {
			return entry{}, errors.New("want DST=TARGET")
		}
		e.kind, e.target = tar.TypeSymlink, rhs
	}
	for _, kv := range fields[1:] {
		k, val, ok := strings.Cut(kv, "=")
		if !ok {
			return entry{}, fmt.Errorf("option %q: want key=value", kv)
		}
		var err error
		switch k {
		case "mode":
			e.mode, err = strconv.ParseInt(val, 8, 32)
		case "uid":
			e.uid, err = strconv.Atoi(val)
		case "gid":
			e.gid, err = strconv.Atoi(val)
		default:
			err = errors.New("unknown option (mode, uid, gid)")
		}
		if err != nil {
			return entry{}, fmt.Errorf("option %q: %w", kv, err)
		}
	}
	return e, nil
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, " ") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "assemble-image:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("assemble-image", flag.ContinueOnError)
	var (
		s                       spec
		envs, labels            listFlag
		tag, out, user, workdir string
		entrypoint, cmd         string
		created                 string
	)
	fs.StringVar(&tag, "tag", "", "image name and tag, as the manifests name it")
	fs.StringVar(&out, "out", "", "docker-archive tarball to write")
	fs.StringVar(&user, "user", "", "config User (e.g. 65532:65532)")
	fs.StringVar(&workdir, "workdir", "", "config WorkingDir")
	fs.StringVar(&entrypoint, "entrypoint", "", `config Entrypoint, a JSON array (e.g. ["/csi-resizer"])`)
	fs.StringVar(&cmd, "cmd", "", "config Cmd, a JSON array")
	fs.StringVar(&created, "created", "", "creation time of the image and of every file (RFC 3339); default SOURCE_DATE_EPOCH, else the epoch")
	fs.Var(&envs, "env", "config Env entry K=V (repeatable)")
	fs.Var(&labels, "label", "config label K=V (repeatable)")
	for _, k := range []string{"layer", "file", "dir", "symlink"} {
		fs.Var(specFlag{&s, k}, k, "see the package documentation")
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if tag == "" || out == "" {
		return errors.New("--tag and --out are required")
	}
	ref, err := name.NewTag(tag)
	if err != nil {
		return err
	}
	when, err := creationTime(created)
	if err != nil {
		return err
	}

	cfg := v1.Config{User: user, WorkingDir: workdir, Env: envs}
	if cfg.Entrypoint, err = jsonArray("--entrypoint", entrypoint); err != nil {
		return err
	}
	if cfg.Cmd, err = jsonArray("--cmd", cmd); err != nil {
		return err
	}
	if len(labels) > 0 {
		cfg.Labels = map[string]string{}
		for _, l := range labels {
			k, v, ok := strings.Cut(l, "=")
			if !ok {
				return fmt.Errorf("--label %q: want K=V", l)
			}
			cfg.Labels[k] = v
		}
	}

	img := empty.Image
	for _, l := range s.layers {
		data, err := layerTar(l, when)
		if err != nil {
			return fmt.Errorf("layer %q: %w", l.createdBy, err)
		}
		tl, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(data)), nil
		})
		if err != nil {
			return err
		}
		img, err = mutate.Append(img, mutate.Addendum{
			Layer:   tl,
			History: v1.History{Created: v1.Time{Time: when}, CreatedBy: l.createdBy},
		})
		if err != nil {
			return err
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = "amd64", "linux"
	cf.Created = v1.Time{Time: when}
	cf.Config = cfg
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	tmp := out + ".tmp"
	if err := tarball.WriteToFile(tmp, ref, img); err != nil {
		return err
	}
	if err := os.Rename(tmp, out); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s %s %s\n", ref.Name(), digest, out)
	return nil
}

func creationTime(s string) (time.Time, error) {
	if s != "" {
		return time.Parse(time.RFC3339, s)
	}
	if e := os.Getenv("SOURCE_DATE_EPOCH"); e != "" {
		n, err := strconv.ParseInt(e, 10, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH: %w", err)
		}
		return time.Unix(n, 0).UTC(), nil
	}
	return time.Unix(0, 0).UTC(), nil
}

func jsonArray(flagName, s string) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	var a []string
	if err := json.Unmarshal([]byte(s), &a); err != nil {
		return nil, fmt.Errorf("%s: want a JSON array of strings: %w", flagName, err)
	}
	return a, nil
}

// layerTar writes the entries of l, and the parent directories they lack, as one tar stream.
func layerTar(l *layer, when time.Time) ([]byte, error) {
	byPath := map[string]entry{}
	for _, e := range l.entries {
		if _, dup := byPath[e.dst]; dup {
			return nil, fmt.Errorf("%s given twice", e.dst)
		}
		byPath[e.dst] = e
	}
	for _, e := range l.entries {
		for d := path.Dir(e.dst); d != "/"; d = path.Dir(d) {
			if _, ok := byPath[d]; !ok {
				byPath[d] = entry{kind: tar.TypeDir, dst: d, mode: 0o755}
			}
		}
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	// Sorted: a parent sorts before its children, and the order never depends on map order.
	sort.Strings(paths)

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		e := byPath[p]
		hdr := &tar.Header{
			Typeflag: e.kind,
			Name:     strings.TrimPrefix(p, "/"),
			Uid:      e.uid,
			Gid:      e.gid,
			ModTime:  when,
			Format:   tar.FormatPAX,
		}
		var content []byte
		switch e.kind {
		case tar.TypeDir:
			hdr.Name += "/"
			hdr.Mode = modeOr(e.mode, 0o755)
		case tar.TypeSymlink:
			hdr.Linkname = e.target
			hdr.Mode = 0o777
		case tar.TypeReg:
			fi, err := os.Stat(e.src)
			if err != nil {
				return nil, err
			}
			if !fi.Mode().IsRegular() {
				return nil, fmt.Errorf("%s is not a regular file", e.src)
			}
			if content, err = os.ReadFile(e.src); err != nil {
				return nil, err
			}
			hdr.Mode = modeOr(e.mode, int64(fi.Mode().Perm()))
			hdr.Size = int64(len(content))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(content); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func modeOr(m, def int64) int64 {
	if m < 0 {
		return def
	}
	return m
}
