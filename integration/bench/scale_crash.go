package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/pkg/fanout"
	"github.com/cohortgate/cohortgate/topics"
)

// The crash path of bench scale: the restart after kill -9, from a gate
// snapshot written while running and older than the store.
//
// Once per size, the store (and the snapshot its clean stop wrote) is
// cloned into a data dir of its own, members-<n>-crash (the store's files
// linked, not copied: Pebble never changes a table in place), so that the
// commands this path writes never reach the store the other paths start
// on. A processor P starts there with --gate-snapshot-interval
// --crash-snapshot-interval. Then, --runs times:
//
//  1. a producer writes leaves of users the store does not hold to the
//     embedded broker's commands topic, --crash-load a second;
//  2. once P has written its snapshot while running (after the producer
//     began, so the snapshot holds some of its leaves), the harness waits a
//     random time up to the interval, the producer still writing, and
//     kills P with SIGKILL (P may be writing its next snapshot then);
//  3. a new processor starts on the same data dir and broker log, and the
//     harness times its start → /readyz 200 (it loads the older snapshot
//     and applies again the commands since its label before it is
//     ready), its peak RSS and CPU seconds, the commands its log says it
//     applies again (those since the snapshot's label, at most), and reads
//     from its /metrics the commands it applied before ready (those again,
//     and those the killed process had not applied yet: nothing arrives
//     after the kill) and its gate's members, which must be the
//     store's members plus the leaves in the commands topic, each of a
//     user of its own. It is the next run's P.
//
// The last P stops with SIGTERM.

// wroteRunningLine is the processor's log line of a snapshot written while
// running.
var wroteRunningLine = regexp.MustCompile(`msg="wrote gate snapshot while running".*\btook=(\S+)`)

// crashRun is one restart after kill -9.
type crashRun struct {
	startRun
	applied   float64 // commands applied from the start to ready: again, and those the killed process had not applied
	members   float64 // the gate's members once ready
	killedAt  time.Duration
	rssKilled int64 // VmHWM of the process killed: it ran under the load and wrote snapshots
}

// crashRuns measures the crash path at size n on a clone of the store in
// dir. It returns the restarts and the took= of every snapshot written
// while running (the time the commands waited for it).
func crashRuns(ctx context.Context, o *scaleOptions, ps *procs, dir string, n int, printf func(string, ...any)) ([]crashRun, []float64, error) {
	crashDir := dir + "-crash"
	if err := cloneDataDir(dir, crashDir); err != nil {
		return nil, nil, fmt.Errorf("unable to clone %s: %w", dir, err)
	}
	httpAddr, err := freeAddr()
	if err != nil {
		return nil, nil, err
	}
	kafkaAddr, err := freeAddr()
	if err != nil {
		return nil, nil, err
	}
	extra := []string{"--gate-snapshot-interval", o.crashInterval.String()}
	// Every line of a snapshot written while running, from every process
	// of the path; read once the path is done.
	writes := make(chan time.Duration, 4096)
	// The current process's lines, told apart from an earlier one's.
	type snapLine struct {
		gen int64
		at  time.Time
	}
	snapped := make(chan snapLine, 64)
	var gen atomic.Int64
	onLine := func(g int64) func(string) {
		return func(l string) {
			m := wroteRunningLine.FindStringSubmatch(l)
			if m == nil {
				return
			}
			if d, err := time.ParseDuration(m[1]); err == nil {
				select {
				case writes <- d:
				default:
				}
			}
			select {
			case snapped <- snapLine{gen: g, at: time.Now()}:
			default:
			}
		}
	}
	collect := func() []float64 {
		var out []float64
		for {
			select {
			case d := <-writes:
				out = append(out, d.Seconds())
			default:
				return out
			}
		}
	}
	name := func(i int) string { return fmt.Sprintf("crash-%d-%d", n, i) }
	c, first, err := launch(ctx, o, ps, crashDir, name(0), httpAddr, kafkaAddr, extra, onLine(0), printf)
	if err != nil {
		return nil, nil, err
	}
	printf("%s: ready in %.2fs (restore from the %s); %d crash runs follow", name(0), first.ready.Seconds(), first.source, o.runs)
	rng := rand.New(rand.NewPCG(uint64(n), 0xc4a54))
	var out []crashRun
	nextUser := uint64(1) // users of the leaves: small ids, which memberIDs' random ones all but never are
	for i := 1; i <= o.runs; i++ {
		if err := ctx.Err(); err != nil {
			c.stop(time.Minute)
			return out, collect(), err
		}
		load := startLeaves(kafkaAddr, nextUser, o.crashLoad)
		loadStart := time.Now()
		// The first snapshot written while running after the load began.
		var snapAt time.Time
		wait := time.NewTimer(2*time.Minute + 10*o.crashInterval)
		for snapAt.IsZero() {
			select {
			case s := <-snapped:
				if s.gen == gen.Load() && s.at.After(loadStart) {
					snapAt = s.at
				}
			case <-wait.C:
				load.stop()
				c.stop(time.Minute)
				return out, collect(), fmt.Errorf("%s: no snapshot written while running within %v of the load", name(i-1), 2*time.Minute+10*o.crashInterval)
			case <-ctx.Done():
				load.stop()
				c.stop(time.Minute)
				return out, collect(), ctx.Err()
			}
		}
		wait.Stop()
		delay := time.Duration(rng.Int64N(int64(o.crashInterval)))
		time.Sleep(delay)
		rssKilled, _ := procPeakRSS(c.pid())
		c.kill()
		killedAt := time.Since(loadStart)
		sent := load.stop()
		nextUser += uint64(sent) + 1
		printf("%s: killed (SIGKILL) %.2fs after its snapshot written while running, %.1fs into a load of %d leaves/s (%d acknowledged)",
			name(i-1), delay.Seconds(), killedAt.Seconds(), o.crashLoad, load.acked.Load())

		gen.Store(int64(i))
		var run startRun
		c, run, err = launch(ctx, o, ps, crashDir, name(i), httpAddr, kafkaAddr, extra, onLine(int64(i)), printf)
		if err != nil {
			return out, collect(), err
		}
		cr := crashRun{startRun: run, killedAt: killedAt, rssKilled: rssKilled}
		fail := func(err error) ([]crashRun, []float64, error) {
			c.stop(5 * time.Minute)
			return out, collect(), fmt.Errorf("%s: %w", name(i), err)
		}
		if run.source != "snapshot" {
			return fail(fmt.Errorf("restored by the %s, not from the snapshot written while running", run.source))
		}
		m, err := scrapeCrash(ctx, "http://"+httpAddr)
		if err != nil {
			return fail(err)
		}
		cr.applied, cr.members = m.commands, m.members
		want, err := leavesInTopic(ctx, kafkaAddr)
		if err != nil {
			return fail(err)
		}
		if int64(cr.members) != int64(n)+want {
			return fail(fmt.Errorf("the gate holds %.0f members once ready; want %d (the store's) + %d (the leaves in %s)",
				cr.members, n, want, topics.Commands))
		}
		printf("%s: ready in %.2fs (restore %.2fs from the %s), %.0f commands applied (%d of them again), peak RSS %s, %.1f CPU s; gate %.0f members = %d + %d leaves",
			name(i), run.ready.Seconds(), run.restore.Seconds(), run.source, cr.applied, run.again, mib(run.rss), run.cpu, cr.members, n, want)
		out = append(out, cr)
	}
	c.stop(5 * time.Minute)
	return out, collect(), nil
}

// kill ends the process group with SIGKILL, at once, and waits for it.
func (c *child) kill() {
	if c.exited() {
		return
	}
	_ = syscall.Kill(-c.pid(), syscall.SIGKILL)
	<-c.done
}

// cloneDataDir makes dst a data dir holding src's membership store, gate
// snapshot and embedded broker log (whose commands topic the store
// records), and nothing else (no instance id). The store's tables are
// hard links (Pebble writes a table once and never changes it; the
// clone's compactions make new ones), its other files copies (the WAL
// and the manifest are appended to); the snapshot is a link too (the
// processor replaces it by a rename, never in place); the broker log, a
// few empty topics, is copied.
func cloneDataDir(src, dst string) error {
	if err := os.RemoveAll(dst); err != nil {
		return err
	}
	err := filepath.WalkDir(filepath.Join(src, "membership"), func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		switch {
		case e.IsDir():
			return os.MkdirAll(to, 0o755)
		case !e.Type().IsRegular() || e.Name() == "LOCK":
			return nil
		case strings.HasSuffix(e.Name(), ".sst"):
			return os.Link(path, to)
		default:
			return copyFile(path, to)
		}
	})
	if err != nil {
		return err
	}
	err = filepath.WalkDir(filepath.Join(src, "embedded-kafka"), func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if e.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if !e.Type().IsRegular() {
			return nil
		}
		return copyFile(path, filepath.Join(dst, rel))
	})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	snap := filepath.Join(src, snapshotFile)
	if err := os.Link(snap, filepath.Join(dst, snapshotFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// leaves is a producer of leaves of new users, one a user, at a rate.
type leaves struct {
	cancel context.CancelFunc
	done   chan struct{}
	cl     *kgo.Client
	sent   atomic.Int64
	acked  atomic.Int64
}

// startLeaves produces, to the commands topic at broker, leaves of users
// from, from+1, ... at rate a second, in batches every 10 ms, until stop.
func startLeaves(broker string, from uint64, rate int) *leaves {
	ctx, cancel := context.WithCancel(context.Background())
	l := &leaves{cancel: cancel, done: make(chan struct{})}
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.ClientID("cohortgate-bench-crash-load"),
		kgo.DefaultProduceTopic(string(topics.Commands)), kgo.RecordRetries(3))
	if err != nil {
		close(l.done)
		return l
	}
	l.cl = cl
	go func() {
		defer close(l.done)
		const tick = 10 * time.Millisecond
		t := time.NewTicker(tick)
		defer t.Stop()
		start := time.Now()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			due := int64(time.Since(start).Seconds() * float64(rate))
			for l.sent.Load() < due && ctx.Err() == nil {
				user := from + uint64(l.sent.Add(1)) - 1
				now := time.Now()
				cl.Produce(ctx, &kgo.Record{
					Key:       topics.AppendUserID(nil, user),
					Value:     topics.AppendCommand(nil, topics.Command{Op: topics.Leave, UserID: user, AtNs: uint64(now.UnixNano()), HasAt: true}),
					Timestamp: now,
				}, func(_ *kgo.Record, err error) {
					if err == nil {
						l.acked.Add(1)
					}
				})
			}
		}
	}()
	return l
}

// stop ends the producer, dropping what it has not sent, and returns how
// many leaves it handed to its client.
func (l *leaves) stop() int64 {
	l.cancel()
	<-l.done
	if l.cl != nil {
		l.cl.Close()
	}
	return l.sent.Load()
}

// leavesInTopic is how many records the commands topic at broker holds:
// the harness's leaves, nothing else writes there.
func leavesInTopic(ctx context.Context, broker string) (int64, error) {
	a, err := newAdmin([]string{broker})
	if err != nil {
		return 0, err
	}
	defer a.close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ends, err := a.endOffsets(ctx, string(topics.Commands))
	if err != nil {
		return 0, err
	}
	return ends.sum(), nil
}

// crashMetrics are what a crash restart's /metrics says once ready.
type crashMetrics struct {
	commands float64 // every series of the commands applied
	members  float64 // the gate's members
}

func scrapeCrash(ctx context.Context, base string) (crashMetrics, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return crashMetrics{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return crashMetrics{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return crashMetrics{}, fmt.Errorf("%s/metrics: %s", base, resp.Status)
	}
	return parseCrashMetrics(resp.Body)
}

// parseCrashMetrics sums the commands applied over their series and reads
// the gate's members from a Prometheus text exposition.
func parseCrashMetrics(r io.Reader) (crashMetrics, error) {
	var m crashMetrics
	seen := false
	err := eachSample(r, func(_, name string, v float64) error {
		switch name {
		case fanout.MetricCommands:
			m.commands += v
		case fanout.MetricGateMembers:
			m.members, seen = v, true
		}
		return nil
	})
	if err == nil && !seen {
		err = fmt.Errorf("no %s in the metrics", fanout.MetricGateMembers)
	}
	return m, err
}
