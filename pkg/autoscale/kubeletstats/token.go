package kubeletstats

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// tokenSource reads the bearer token from a file and keeps it for a while. A projected
// ServiceAccount token is replaced in place by the kubelet before it expires, so a token read
// once at start would stop working after an hour or so; reading the file for every request to
// hundreds of nodes would be wasteful. So: re-read when the cached token is older than refresh,
// and at once when a kubelet answers 401 (get(true)).
type tokenSource struct {
	path    string
	refresh time.Duration
	clock   clock.PassiveClock

	mu     sync.Mutex
	token  string
	readAt time.Time
}

// get returns the token, reading the file when forced, when nothing was read yet, or when the
// cached token is older than refresh. An empty path gives "" (no token).
func (t *tokenSource) get(force bool) (string, error) {
	if t.path == "" {
		return "", nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clock.Now()
	if !force && t.token != "" && now.Sub(t.readAt) < t.refresh {
		return t.token, nil
	}
	data, err := os.ReadFile(t.path)
	if err != nil {
		return "", fmt.Errorf("reading the bearer token file: %w", err)
	}
	token := strings.TrimSpace(string(data))
	if token == "" {
		return "", fmt.Errorf("the bearer token file %s is empty", t.path)
	}
	t.token, t.readAt = token, now
	return token, nil
}
