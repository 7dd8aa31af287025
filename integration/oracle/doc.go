// Package oracle judges a cohortgate run from its five topics alone: it
// recomputes, from the records in the input topics and the rules of the
// README ("What it promises", "The rules, precisely") and docs/client.md
// ("Record formats"), what the processor had to write, and compares that with what it wrote.
// The chaos harness (integration/chaos) calls [Verify] after each scenario.
//
// # Shares no code
//
// The oracle imports nothing of cohortgate (a test fails if it does,
// transitively): not the processor's model (pkg/membership), its gate
// (pkg/gate), its pipeline (pkg/fanout) nor its record decoders (topics).
// It decodes keys, commands and changelog records with its own
// encoding/json code (integers as json.Number, never float64), partitions
// with its own murmur2 (checked against the test vectors of Kafka's Java
// Utils.murmur2), and applies its own episode model, written from rules
// C1-C7. A bug shared by the processor and its verifier would pass; here
// there is nothing to share. Only the reading of Kafka (franz-go) is common.
//
// # What it computes
//
// Commands are taken per commands partition in offset order, read
// committed (aborted records and open transactions never count). Each
// record goes to the DLQ (C1 key, C3 value, C4 boundary out of range or
// beyond MaxFutureSkew of its own timestamp), is re-published elsewhere
// (C2, misrouted by murmur2), or reaches the model: identity dedupe (C5),
// leave (C6: clamped to the end of the last closed episode, the earliest
// boundary wins, an empty last episode [t,t) reopened) and rejoin (C7:
// refused before the open leave, an empty episode at the same boundary).
// The result is each user's final episodes; times are ns since the Unix
// epoch, event times are record timestamps (ms) × 10^6.
//
// Signals: a bad key goes to the DLQ (S1); a misrouted record must have a
// copy in its key's partition carrying cohortgate.misrouted.from (S2),
// and the copy is judged in its place; a signal near or above the cohort
// topic's max.message.bytes may go to the DLQ as record_too_large (S3);
// otherwise a signal must be forwarded exactly once iff its event time lies
// in none of its user's final episodes (S5; an empty episode holds
// nothing). A signal is identified by key, value and timestamp, which the
// cohort topic keeps.
//
// When the topics grew during the run (Config.Earlier), a record in its
// key's partition under an earlier count only was routed right when it
// was written: it is judged at its re-published copy if there is one, else
// where it is; a grown changelog (Config.ChangelogGrew) orders a user's
// records by their command's partition count, then offset.
//
// With several routes (Topics.Routes), each input's signals are judged
// against its own output by the same rules, the same final episodes and
// the same changelog: one leave gates every route, and a late-leave window
// is justified by a signal forwarded on any of them.
//
// # What Kafka cannot tell
//
// Two facts are not in the topics, and the load says them in the header
// [HeaderExpect] of a signal: [ExpectTimestampSkew], stamped further
// ahead of the producer's clock than the skew (rule S4 is judged by the
// processor's clock); and [ExpectGated], produced after Kafka
// acknowledged a leave that covers it, so promise 1 forbids forwarding it
// even where a late-leave window would excuse it (promise 2). The oracle
// checks the second claim against its model (Report.Contradictions).
//
// # The verdict
//
// [Report] counts the damage: duplicates, lost, leaked and unknown cohort
// records; hanging transactions; input records the rules dead-letter that
// no DLQ record names (by cohortgate.source.topic/.partition/.offset, with
// a fitting reason, and for a truncated record_too_large copy the
// original's SHA-256); misrouted records never re-published; users whose
// latest changelog record states other episodes than the model (or who
// have none though a command of theirs reached rule C5); late-leave
// windows that vanish from a later record of their user (missing) or hold
// no forwarded signal of a final episode (spurious, for exact windows). A
// signal forwarded inside a final episode and covered by a window of its
// user's latest record is late: allowed, counted, shown; so are windows
// with "exact": false. At-least-once outputs are judged as such:
// commands' DLQ records may repeat, and a changelog record restating an
// earlier command's record is let off unless it is the user's latest.
//
// [Judge] does the judging on records in memory, so that tests feed it
// synthetic runs; [Verify] reads Kafka and feeds it. A Judge is not safe
// for concurrent use.
//
// # Memory
//
// A signal whose value is numbered ("sig-<seq>-…", as the chaos load
// writes them) and that the rules leave to S5 alone (a user id in its
// key's partition, no re-published copy, marked at most gated, far from
// the size limit) is kept in a table indexed by its number: a CRC-32C of
// its key, value and timestamp, and one byte of flags and output count;
// an output record is matched to it by number and CRC. Its user and time
// are kept beside (about 30 bytes more) unless the Judge was sealed
// ([Judge.Seal]: every command is in) when it came and it lies in no
// final episode, which is then known: 5 bytes a signal. Every other record
// is kept as a digest of about 600 bytes, as before. Verify reads the
// commands first and seals, and reads inputs before outputs, so that
// outputs find their signal in the table (an output met first is kept in
// full until Report joins it): a soak's 100M signals take about 0.5 GiB.
package oracle
