// Command dockerfile-lint checks the repository's Dockerfile and .dockerignore without a
// Docker engine. It runs three kinds of checks and prints what it checked:
//
//  1. BuildKit's own Dockerfile checks, the rules of `docker build --check`
//     (dockerfile2llb.DockerfileLint), experimental rules included. Base images are not pulled:
//     an offline table gives the image config (platform, ENV, USER) of each base image the
//     Dockerfile may use, and any other base image is an error.
//  2. Project policy on the parsed instructions: a builder stage that compiles the three binaries
//     statically from vendor/ with the version stamp, a distroless nonroot final stage with
//     only COPY --from=builder of /csi-resizer, /statefulset-resizer and /volume-autoscaler, USER 0:0,
//     exec-form ENTRYPOINT ["/csi-resizer"], tagged base images, no ADD, no downloads.
//  3. The build context: every file `go build` reads for the three binaries (as `go list -deps`
//     reports it for linux/amd64 and linux/arm64, vendor/ included), and go.mod, go.sum and
//     vendor/modules.txt, must survive .dockerignore.
//
// Usage: go run . -root ../..   (hack/lint-dockerfile.sh does this)
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/distribution/reference"
	"github.com/moby/buildkit/client/llb"
	"github.com/moby/buildkit/client/llb/sourceresolver"
	"github.com/moby/buildkit/frontend/dockerfile/dockerfile2llb"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
	digest "github.com/opencontainers/go-digest"
)

// The binaries the image must hold, as built by `go build -o /out/ <pkg>...`.
var binaries = []string{"csi-resizer", "statefulset-resizer", "volume-autoscaler"}

const (
	finalBase  = "gcr.io/distroless/static-debian12:nonroot"
	finalUser  = "0:0"
	entrypoint = "/csi-resizer"
)

// baseImages is the offline stand-in for a registry: image config per repository, enough for
// the checks that read the base image (platform, ENV for UndefinedVar, USER).
var baseImages = map[string]imageConfig{
	"docker.io/library/golang": {
		Env:        []string{"PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "GOLANG_VERSION=1.26.0", "GOTOOLCHAIN=local", "GOPATH=/go"},
		WorkingDir: "/go",
	},
	"gcr.io/distroless/static-debian12": {
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"},
		User:       "65532",
		WorkingDir: "/home/nonroot",
	},
}

type imageConfig struct {
	Env        []string
	User       string
	WorkingDir string
}

type offlineResolver struct{}

func (offlineResolver) ResolveImageConfig(_ context.Context, ref string, opt sourceresolver.Opt) (string, digest.Digest, []byte, error) {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return "", "", nil, err
	}
	cfg, ok := baseImages[named.Name()]
	if !ok {
		return "", "", nil, fmt.Errorf("base image %s is not in dockerfile-lint's offline table (hack/dockerfile-lint/main.go baseImages): add its config there", ref)
	}
	os, arch := "linux", "amd64"
	if opt.ImageOpt != nil && opt.ImageOpt.Platform != nil {
		os, arch = opt.ImageOpt.Platform.OS, opt.ImageOpt.Platform.Architecture
	}
	dt, err := json.Marshal(map[string]any{
		"os":           os,
		"architecture": arch,
		"config":       map[string]any{"Env": cfg.Env, "User": cfg.User, "WorkingDir": cfg.WorkingDir},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{digest.FromString(ref).String()}},
	})
	return ref, "", dt, err
}

type report struct{ failures []string }

func (r *report) failf(format string, args ...any) {
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
}

func main() {
	root := flag.String("root", ".", "repository root (the Docker build context)")
	dockerfile := flag.String("f", "Dockerfile", "Dockerfile, relative to -root unless absolute")
	flag.Parse()

	path := *dockerfile
	if !filepath.IsAbs(path) {
		path = filepath.Join(*root, path)
	}
	dt, err := os.ReadFile(path)
	if err != nil {
		fatal(err)
	}
	r := &report{}
	n := buildkitChecks(r, *dockerfile, dt)
	fmt.Printf("dockerfile-lint: %s: BuildKit checks (the rules of `docker build --check`, experimental ones included): %d finding(s)\n", *dockerfile, n)
	p := policyChecks(r, dt)
	fmt.Printf("dockerfile-lint: %s: %d policy checks\n", *dockerfile, p)
	needed, ctxFiles, ctxBytes := contextChecks(r, *root)
	fmt.Printf("dockerfile-lint: .dockerignore: %d files that `go build` reads for %s (linux/amd64, linux/arm64) checked; context: %d files, %.1f MiB\n",
		needed, strings.Join(binaries, ", "), ctxFiles, float64(ctxBytes)/(1<<20))
	if len(r.failures) > 0 {
		for _, f := range r.failures {
			fmt.Fprintf(os.Stderr, "FAIL: %s\n", f)
		}
		fmt.Fprintf(os.Stderr, "dockerfile-lint: %d problem(s)\n", len(r.failures))
		os.Exit(1)
	}
	fmt.Println("dockerfile-lint: OK")
}

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "dockerfile-lint: %v\n", err)
	os.Exit(2)
}

var checkDirective = regexp.MustCompile(`(?m)^#\s*check\s*=\s*(.*)$`)

// buildkitChecks runs BuildKit's linter. The Dockerfile must carry a `# check=` directive
// with error=true, so that a real `docker buildx build` fails on the same findings; in
// memory (same line, so line numbers hold) the experimental rules are switched on too.
func buildkitChecks(r *report, name string, dt []byte) int {
	m := checkDirective.FindSubmatchIndex(dt)
	if m == nil {
		r.failf("%s: no `# check=error=true` parser directive at the top", name)
	} else {
		opts := string(dt[m[2]:m[3]])
		if !regexp.MustCompile(`(^|;)\s*error\s*=\s*true\s*($|;)`).MatchString(opts) {
			r.failf("%s: the check directive %q must contain error=true", name, opts)
		}
		if !strings.Contains(opts, "experimental=") {
			patched := append([]byte{}, dt[:m[3]]...)
			patched = append(patched, ";experimental=all"...)
			dt = append(patched, dt[m[3]:]...)
		}
	}
	sm := llb.NewSourceMap(nil, name, "Dockerfile", dt)
	sm.Definition = &llb.Definition{}
	res, err := dockerfile2llb.DockerfileLint(context.Background(), dt, dockerfile2llb.ConvertOpt{
		MetaResolver: offlineResolver{},
		SourceMap:    sm,
	})
	if err != nil {
		r.failf("%s: %v", name, err)
		return 0
	}
	for _, w := range res.Warnings {
		line := 0
		if w.Location != nil && len(w.Location.Ranges) > 0 {
			line = int(w.Location.Ranges[0].Start.Line)
		}
		r.failf("%s:%d: %s: %s (%s)", name, line, w.RuleName, w.Detail, w.URL)
	}
	if res.Error != nil {
		r.failf("%s: does not build: %s", name, res.Error.Message)
	}
	return len(res.Warnings)
}

// policyChecks checks the parsed Dockerfile against what the project ships.
func policyChecks(r *report, dt []byte) int {
	checks := 0
	check := func(ok bool, format string, args ...any) {
		checks++
		if !ok {
			r.failf(format, args...)
		}
	}
	ast, err := parser.Parse(bytes.NewReader(dt))
	if err != nil {
		r.failf("parse: %v", err)
		return checks
	}
	stages, metaArgs, err := instructions.Parse(ast.AST, nil)
	if err != nil {
		r.failf("parse: %v", err)
		return checks
	}
	// Defaults of the ARGs before the first FROM, to resolve base image names.
	env := map[string]string{}
	for _, a := range metaArgs {
		for _, kv := range a.Args {
			if kv.Value != nil {
				env[kv.Key] = *kv.Value
			}
		}
	}
	lex := shell.NewLex(ast.EscapeToken)
	names := map[string]bool{}
	for _, st := range stages {
		base, _, err := lex.ProcessWord(st.BaseName, shell.EnvsFromSlice(envSlice(env)))
		check(err == nil, "FROM %s: %v", st.BaseName, err)
		if !names[strings.ToLower(base)] {
			ref, err := reference.ParseNormalizedNamed(base)
			tagged := false
			if err == nil {
				_, isTagged := ref.(reference.Tagged)
				_, isDigested := ref.(reference.Digested)
				tagged = isTagged || isDigested
				if t, ok := ref.(reference.Tagged); ok && t.Tag() == "latest" {
					tagged = false
				}
			}
			check(tagged, "FROM %s: base images need an explicit tag other than latest, or a digest", base)
		}
		if st.Name != "" {
			names[strings.ToLower(st.Name)] = true
		}
		for _, c := range st.Commands {
			switch c := c.(type) {
			case *instructions.AddCommand:
				check(false, "line %d: ADD: use COPY (ADD fetches URLs and unpacks archives implicitly)", c.Location()[0].Start.Line)
			case *instructions.RunCommand:
				cmd := strings.Join(c.CmdLine, " ")
				for _, bad := range []string{"curl ", "wget ", "apt-get", "apk ", "go mod download", "go get "} {
					check(!strings.Contains(cmd, bad), "line %d: RUN %q: the build works offline from vendor/, no %q", c.Location()[0].Start.Line, cmd, strings.TrimSpace(bad))
				}
			}
		}
	}
	if len(stages) < 2 {
		r.failf("want a multi-stage build (builder + runtime), got %d stage(s)", len(stages))
		return checks + 1
	}

	// The builder.
	var builder *instructions.Stage
	for i := range stages {
		if stages[i].Name == "builder" {
			builder = &stages[i]
		}
	}
	check(builder != nil, "no stage named builder")
	if builder != nil {
		var build string
		for _, c := range builder.Commands {
			if run, ok := c.(*instructions.RunCommand); ok && strings.Contains(strings.Join(run.CmdLine, " "), "go build") {
				build = strings.Join(run.CmdLine, " ")
			}
		}
		check(build != "", "builder: no RUN ... go build")
		for _, want := range []string{"CGO_ENABLED=0", "-mod=vendor", "-trimpath", "-s -w", "-X main.version=${VERSION}"} {
			check(strings.Contains(build, want), "builder: go build must use %q (static, from vendor/, reproducible, stamped): %s", want, build)
		}
		for _, b := range binaries {
			check(strings.Contains(build, "./cmd/"+b), "builder: go build does not build ./cmd/%s", b)
		}
		hasVersionArg := false
		for _, c := range builder.Commands {
			if a, ok := c.(*instructions.ArgCommand); ok {
				for _, kv := range a.Args {
					hasVersionArg = hasVersionArg || kv.Key == "VERSION"
				}
			}
		}
		check(hasVersionArg, "builder: no ARG VERSION for -X main.version")
	}

	// The runtime image.
	final := stages[len(stages)-1]
	check(final.BaseName == finalBase, "final stage: FROM %s, want %s", final.BaseName, finalBase)
	var user, ep []string
	copied := map[string]bool{}
	for _, c := range final.Commands {
		switch c := c.(type) {
		case *instructions.UserCommand:
			user = append(user, c.User)
		case *instructions.EntrypointCommand:
			check(!c.PrependShell, "final stage: ENTRYPOINT must be in exec form (distroless has no shell)")
			ep = c.CmdLine
		case *instructions.CmdCommand:
			check(!c.PrependShell, "final stage: CMD must be in exec form (distroless has no shell)")
		case *instructions.RunCommand:
			check(false, "final stage: RUN at line %d: distroless has no shell, and the runtime image stays as built", c.Location()[0].Start.Line)
		case *instructions.CopyCommand:
			check(c.From == "builder", "final stage: COPY at line %d must copy from the builder stage, not from %q", c.Location()[0].Start.Line, c.From)
			if c.From == "builder" && len(c.SourcePaths) == 1 {
				copied[c.SourcePaths[0]+" "+c.DestPath] = true
			}
		}
	}
	for _, b := range binaries {
		check(copied["/out/"+b+" /"+b], "final stage: no COPY --from=builder /out/%s /%s", b, b)
	}
	check(len(user) > 0 && user[len(user)-1] == finalUser, "final stage: last USER is %v, want %s (root, as upstream: the driver's socket is commonly root's 0755; numeric, so runAsNonRoot can verify it)", user, finalUser)
	check(slices.Equal(ep, []string{entrypoint}), "final stage: ENTRYPOINT %q, want [%q]", ep, entrypoint)
	return checks
}

func envSlice(m map[string]string) []string {
	var s []string
	for k, v := range m {
		s = append(s, k+"="+v)
	}
	sort.Strings(s)
	return s
}

type goPackage struct {
	Dir, ImportPath                               string
	Standard                                      bool
	GoFiles, CgoFiles, SFiles, HFiles, EmbedFiles []string
	Error                                         *struct{ Err string }
}

// contextChecks makes sure that .dockerignore keeps every file the build reads.
func contextChecks(r *report, root string) (needed, ctxFiles int, ctxBytes int64) {
	root, err := filepath.Abs(root)
	if err != nil {
		fatal(err)
	}
	var patterns []string
	if f, err := os.Open(filepath.Join(root, ".dockerignore")); err == nil {
		patterns, err = ignorefile.ReadAll(f)
		f.Close()
		if err != nil {
			r.failf(".dockerignore: %v", err)
		}
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		r.failf(".dockerignore: %v", err)
		return
	}
	excluded := func(rel string) bool {
		ok, err := pm.MatchesOrParentMatches(filepath.ToSlash(rel))
		if err != nil {
			r.failf(".dockerignore: %s: %v", rel, err)
		}
		return ok
	}

	files := map[string]bool{"go.mod": true, "go.sum": true, "vendor/modules.txt": true}
	for _, arch := range []string{"amd64", "arm64"} {
		args := []string{"list", "-e", "-deps", "-json=Dir,ImportPath,Standard,GoFiles,CgoFiles,SFiles,HFiles,EmbedFiles,Error"}
		for _, b := range binaries {
			args = append(args, "./cmd/"+b)
		}
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=vendor", "GOWORK=off", "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			r.failf("go list %s (linux/%s): %v", strings.Join(args[1:], " "), arch, err)
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(out))
		for dec.More() {
			var p goPackage
			if err := dec.Decode(&p); err != nil {
				fatal(err)
			}
			if p.Standard {
				continue
			}
			if p.Error != nil {
				r.failf("go list (linux/%s): %s: %s", arch, p.ImportPath, p.Error.Err)
				continue
			}
			rel, err := filepath.Rel(root, p.Dir)
			if err != nil || strings.HasPrefix(rel, "..") {
				r.failf("go list (linux/%s): package %s is outside the build context (%s): is vendor/ complete?", arch, p.ImportPath, p.Dir)
				continue
			}
			for _, list := range [][]string{p.GoFiles, p.CgoFiles, p.SFiles, p.HFiles, p.EmbedFiles} {
				for _, f := range list {
					files[filepath.Join(rel, f)] = true
				}
			}
		}
	}
	var sorted []string
	for f := range files {
		sorted = append(sorted, f)
	}
	sort.Strings(sorted)
	for _, f := range sorted {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			r.failf("build input %s: %v", f, err)
		} else if excluded(f) {
			r.failf(".dockerignore excludes %s, which the build needs", f)
		}
	}

	// Size of the context, for the record.
	_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if rel == "." {
			return nil
		}
		if d.IsDir() {
			// A directory whose pattern matches may still have re-included children
			// (!pattern), so only skip it when no exception pattern exists.
			if excluded(rel) && !pm.Exclusions() {
				return filepath.SkipDir
			}
			return nil
		}
		if !excluded(rel) {
			ctxFiles++
			if info, err := d.Info(); err == nil {
				ctxBytes += info.Size()
			}
		}
		return nil
	})
	return len(sorted), ctxFiles, ctxBytes
}
