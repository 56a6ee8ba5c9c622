package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/acemq/acemq-flow/internal/chaos/chaosflow"
)

// workerCloseTimeout is every worker's --close-timeout: how long its drain
// may take after SIGTERM.
const workerCloseTimeout = 10 * time.Second

// readyTimeout bounds a worker's start, until it logs that it works.
const readyTimeout = time.Minute

// errStopping: the fleet is being stopped and starts no more workers.
var errStopping = errors.New("the workers are being stopped")

// fleet runs a scenario's workers: `<bin> worker` processes, each logging
// to a file of its own. It supervises them as an operator's supervisor
// would: a worker that exits without being asked to is noted and
// replaced.
type fleet struct {
	ctx               context.Context
	bin, logs, prefix string
	env               []string
	s                 *session

	mu       sync.Mutex
	seq      int
	workers  []*worker
	names    map[string]string // chaosflow.WorkerNameOf(pid) -> worker name
	stopping bool
	// watchers are the goroutines waiting for each worker to exit.
	watchers sync.WaitGroup
}

// worker is one worker process.
type worker struct {
	name, logPath string
	// env is what the worker's environment has beyond the fleet's (a
	// version of the deploy flow): a replacement gets it too.
	env  []string
	cmd  *exec.Cmd
	done chan struct{}
	// code is the exit status once done is closed (-1: killed by a signal).
	code int
	// asked says the driver stopped it on purpose.
	asked atomic.Bool
	// killed is when the driver SIGKILLed it (zero if it did not).
	killed time.Time
}

func newFleet(ctx context.Context, bin, logs, prefix string, env []string, s *session) *fleet {
	return &fleet{ctx: ctx, bin: bin, logs: logs, prefix: prefix, env: env, s: s, names: map[string]string{}}
}

// start starts a worker and waits until it logs that it works.
func (f *fleet) start(ctx context.Context) (*worker, error) { return f.startWith(ctx, nil) }

// startWith is start with env added to the fleet's environment (a
// variable of both takes env's value).
func (f *fleet) startWith(ctx context.Context, env []string) (*worker, error) {
	f.mu.Lock()
	if f.stopping {
		f.mu.Unlock()
		return nil, errStopping
	}
	f.seq++
	w := &worker{name: fmt.Sprintf("w%d", f.seq), env: env, done: make(chan struct{})}
	f.mu.Unlock()
	w.logPath = filepath.Join(f.logs, f.prefix+"-"+w.name+".log")
	lf, err := os.Create(w.logPath)
	if err != nil {
		return nil, fmt.Errorf("%s: log: %w", w.name, err)
	}
	w.cmd = exec.Command(f.bin, "worker", "--close-timeout", workerCloseTimeout.String())
	w.cmd.Env = append(slices.Clone(f.env), env...)
	w.cmd.Stdout, w.cmd.Stderr = lf, lf
	// A process group of its own, so that a ^C meant for the driver does
	// not reach it (the driver drains it); and killed if the driver dies.
	w.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = w.cmd.Start()
	lf.Close()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", w.name, err)
	}
	f.mu.Lock()
	f.workers = append(f.workers, w)
	f.names[chaosflow.WorkerNameOf(w.cmd.Process.Pid)] = w.name
	// stopAll may have listed the live workers while this one started:
	// it would never be drained, and its watcher never return.
	late := f.stopping
	f.mu.Unlock()
	f.watchers.Go(func() { f.watch(w) })
	if late {
		f.kill(w)
		return nil, errStopping
	}
	return w, f.ready(ctx, w)
}

// ready waits until w logs "worker started", exits, or readyTimeout
// passes.
func (f *fleet) ready(ctx context.Context, w *worker) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		if b, err := os.ReadFile(w.logPath); err == nil && bytes.Contains(b, []byte(`msg="worker started"`)) {
			return nil
		}
		select {
		case <-w.done:
			return fmt.Errorf("%s exited with status %d before it worked: %s", w.name, w.code, lastLines(w.logPath, 5))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not start working within %s: %s", w.name, readyTimeout, lastLines(w.logPath, 5))
		}
	}
}

// watch waits for w to exit and replaces it if nobody asked it to.
func (f *fleet) watch(w *worker) {
	_ = w.cmd.Wait()
	w.code = w.cmd.ProcessState.ExitCode()
	close(w.done)
	if w.asked.Load() || f.isStopping() {
		return
	}
	f.s.note("%s exited on its own with status %d (%s); another was started in its place", w.name, w.code, lastLines(w.logPath, 2))
	if sleep(f.ctx, time.Second) != nil {
		return
	}
	if _, err := f.startWith(f.ctx, w.env); err != nil && !errors.Is(err, errStopping) && f.ctx.Err() == nil {
		f.s.fail("replace %s: %v", w.name, err)
	}
}

func (f *fleet) isStopping() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stopping
}

// oldest is the longest-running live worker, nil if none.
func (f *fleet) oldest() *worker {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, w := range f.workers {
		if !closed(w.done) && !w.asked.Load() {
			return w
		}
	}
	return nil
}

// alive counts the workers running.
func (f *fleet) alive() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, w := range f.workers {
		if !closed(w.done) {
			n++
		}
	}
	return n
}

// kill SIGKILLs w and waits until it is gone.
func (f *fleet) kill(w *worker) {
	w.asked.Store(true)
	f.mu.Lock()
	w.killed = time.Now()
	f.mu.Unlock()
	_ = w.cmd.Process.Signal(syscall.SIGKILL)
	<-w.done
}

// term sends w SIGTERM and waits for it to drain and exit, for at most
// limit (then it is killed, and that is the error); it says how long the
// drain took and the exit status.
func (f *fleet) term(w *worker, limit time.Duration) (time.Duration, int, error) {
	w.asked.Store(true)
	began := time.Now()
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil && !closed(w.done) {
		return 0, 0, fmt.Errorf("SIGTERM %s: %w", w.name, err)
	}
	select {
	case <-w.done:
		return time.Since(began), w.code, nil
	case <-time.After(limit):
		f.kill(w)
		return time.Since(began), w.code, fmt.Errorf("%s did not exit within %s of SIGTERM and was killed: %s", w.name, limit, lastLines(w.logPath, 3))
	}
}

// stopAll drains every live worker (SIGTERM) at once, and waits for every
// worker's watcher. A worker that fails to drain is a failure.
func (f *fleet) stopAll() {
	f.mu.Lock()
	f.stopping = true
	live := make([]*worker, 0, len(f.workers))
	for _, w := range f.workers {
		if !closed(w.done) {
			live = append(live, w)
		}
	}
	f.mu.Unlock()
	var wg sync.WaitGroup
	for _, w := range live {
		wg.Go(func() {
			took, code, err := f.term(w, workerCloseTimeout+10*time.Second)
			switch {
			case err != nil:
				f.s.fail("%v", err)
			case code != 0:
				f.s.fail("%s exited with status %d when drained at the end (after %s): %s", w.name, code, took.Round(10*time.Millisecond), lastLines(w.logPath, 3))
			}
		})
	}
	wg.Wait()
	f.watchers.Wait()
}

// nameOf is the worker an effect's worker field names ("pid-123" is w2),
// or the field itself.
func (f *fleet) nameOf(effectWorker string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n, ok := f.names[effectWorker]; ok {
		return n
	}
	return effectWorker
}

// killedAt is when the worker called name was SIGKILLed (zero if never).
func (f *fleet) killedAt(name string) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, w := range f.workers {
		if w.name == name {
			return w.killed
		}
	}
	return time.Time{}
}

// logAttr finds an attribute of a text-handler log line.
var logAttr = regexp.MustCompile(`(level|msg|queue)=("(?:[^"\\]|\\.)*"|\S+)`)

// warnings are the most frequent kinds of warning and error the workers
// logged (level, message, queue), most frequent first, at most n.
func (f *fleet) warnings(n int) []string {
	counts := map[string]int{}
	for _, p := range f.logPaths() {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			if !strings.Contains(line, "level=WARN") && !strings.Contains(line, "level=ERROR") {
				continue
			}
			var kind []string
			for _, m := range logAttr.FindAllStringSubmatch(line, -1) {
				kind = append(kind, m[2])
			}
			counts[strings.Join(kind, " ")]++
		}
	}
	kinds := slices.Collect(maps.Keys(counts))
	slices.SortFunc(kinds, func(a, b string) int { return cmp.Or(cmp.Compare(counts[b], counts[a]), cmp.Compare(a, b)) })
	out := make([]string, 0, min(n, len(kinds)))
	for _, k := range kinds[:min(n, len(kinds))] {
		out = append(out, fmt.Sprintf("%6d %s", counts[k], k))
	}
	return out
}

// logged counts how often text occurs in the workers' logs.
func (f *fleet) logged(text string) int {
	n := 0
	for _, p := range f.logPaths() {
		if b, err := os.ReadFile(p); err == nil {
			n += bytes.Count(b, []byte(text))
		}
	}
	return n
}

// logPaths are the logs of every worker started.
func (f *fleet) logPaths() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	paths := make([]string, len(f.workers))
	for i, w := range f.workers {
		paths[i] = w.logPath
	}
	return paths
}

// lastLines is the last n lines of a log, joined by " | ", for a message.
func lastLines(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
