package workload

import (
	"testing"
	"time"

	"github.com/cohortgate/cohortgate/integration/oracle"
)

// TestScenes plays one scene of each kind on kfake with no processor and
// has the oracle read the result: each scene writes the records its kind
// promises (misrouted, aborted, re-delivered, dead-lettered ones), and
// every signal it marks gated lies, by the oracle's own model, in an
// episode of its user. With no processor, every record the rules
// dead-letter or re-publish is missing its DLQ record or copy, and every
// signal the oracle expects is lost.
func TestScenes(t *testing.T) {
	brokers := cluster(t)
	for _, tc := range []struct {
		kind  Kind
		check func(t *testing.T, rep oracle.Report)
	}{
		{KindMisroute, func(t *testing.T, rep oracle.Report) {
			// 6 signals and a leave to the CRC32 partition, one signal to the right one.
			want(t, rep, rep.SignalsIn == 7 && rep.CommandsIn == 1 && rep.Misrouted == 7 && rep.MisroutedNotRepublished == 7 &&
				rep.Applied == 0 && rep.Expected == 1 && rep.Gated == 0)
		}},
		{KindTxnHeld, func(t *testing.T, rep oracle.Report) {
			// Three leaves (one committed in the transaction), the signals
			// before them expected, v1's and v2's during the hold and
			// everyone's after the commit gated.
			loops := (rep.SignalsIn - 6) / 3 // three signals a loop while the transaction holds
			want(t, rep, rep.CommandsIn == 3 && rep.Applied == 3 && rep.Users == 3 && rep.Expected == 3 &&
				loops >= 2 && rep.SignalsIn == 6+3*loops && rep.Gated == 2*loops+3)
		}},
		{KindTxnAbort, func(t *testing.T, rep oracle.Report) {
			// The aborted leave is never read; all seven signals are expected.
			want(t, rep, rep.CommandsIn == 0 && rep.SignalsIn == 7 && rep.Expected == 7 && rep.Gated == 0)
		}},
		{KindRedeliver, func(t *testing.T, rep oracle.Report) {
			// u: leave, rejoin, leave (clamped), rejoin, that leave again;
			// w: leave, again, a new leave. u ends Active with two
			// episodes, so its five last signals are expected.
			want(t, rep, rep.CommandsIn == 8 && rep.Applied == 6 && rep.DuplicateCommands == 2 && rep.Users == 2 &&
				rep.Episodes == 3 && rep.SignalsIn == 17 && rep.Gated == 10 && rep.Expected == 5)
		}},
		{KindLateLeave, func(t *testing.T, rep oracle.Report) {
			want(t, rep, rep.CommandsIn == 3 && rep.Applied == 3 && rep.Users == 2 && rep.Episodes == 2 && rep.Gated == 7 &&
				rep.Expected > 0 && rep.Expected < rep.SignalsIn-7)
		}},
		{KindSameMilli, func(t *testing.T, rep oracle.Report) {
			// The empty episode holds nothing, not even the signal of its millisecond.
			want(t, rep, rep.CommandsIn == 2 && rep.Applied == 2 && rep.Refused == 0 && rep.Episodes == 1 &&
				rep.SignalsIn == 4 && rep.Expected == 4)
		}},
		{KindFuture, func(t *testing.T, rep oracle.Report) {
			want(t, rep, rep.CommandsIn == 1 && rep.Applied == 0 && rep.DeadLetters == 2 && rep.PoisonNotDLQd == 2 &&
				rep.SignalsIn == 5 && rep.Expected == 4)
		}},
		{KindPoison, func(t *testing.T, rep oracle.Report) {
			// 19 commands and 2 bad-key signals for the DLQ, one oversize
			// command misrouted; u and big stay Active, their 3 valid
			// signals (one of about 1 MB) expected.
			want(t, rep, rep.CommandsIn == 20 && rep.Applied == 0 && rep.DeadLetters == 21 && rep.PoisonNotDLQd == 21 &&
				rep.Misrouted == 1 && rep.MisroutedNotRepublished == 1 && rep.SignalsIn == 5 && rep.Expected == 3)
		}},
	} {
		t.Run(string(tc.kind), func(t *testing.T) {
			set := newSet(t, brokers, "scene-"+string(tc.kind), 3)
			plan, err := NewPlan(Config{Seed: 3, Users: 1, Partitions: 3,
				Hostile: Hostile{Scenes: 1, Shares: Shares{tc.kind: 1}, Grace: 200 * time.Millisecond, Hold: time.Second}})
			if err != nil {
				t.Fatal(err)
			}
			final, err := Produce(testCtx(t), newClients(t, brokers, true, "scene-"+string(tc.kind)), set, plan, nil)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := oracle.Verify(testCtx(t), brokers, oracleTopics(set), &oracle.Options{Grace: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%v\n%+v", final, rep)
			if final.Scenes != 1 || final.SignalIDs() != rep.SignalsIn || rep.Contradictions != 0 || rep.Hanging != 0 {
				t.Fatalf("progress %v: %d signal ids, the oracle read %d signals, %d contradictions, %d hanging\n%s",
					final, final.SignalIDs(), rep.SignalsIn, rep.Contradictions, rep.Hanging, rep.Details())
			}
			if rep.Lost != rep.Expected {
				t.Fatalf("%d lost of %d expected with no processor", rep.Lost, rep.Expected)
			}
			tc.check(t, rep)
		})
	}
}

func want(t *testing.T, rep oracle.Report, ok bool) {
	t.Helper()
	if !ok {
		t.Fatalf("report %+v\n%s", rep, rep.Details())
	}
}
