// Package sink writes a job's results durably into its output directory and
// uploads closed shards to S3.
//
// Layout of output.dir:
//
//	shards/part-NNNNN.jsonl        closed, immutable shards (OpenAI Batch output lines)
//	shards/part-NNNNN.jsonl.open   the shard being filled (at most one)
//	errors.jsonl                   permanent failures and bad input lines
//	manifest.json                  the closed shards: records, bytes, sha256, s3_key
//	.gend/part-NNNNN.lines         per-shard index of input lines (fast resume)
//
// Every input line ends up at most once in shards ∪ errors.jsonl whatever
// the crash point; docs/durability.md gives the order of operations and the
// reasoning.
//
// Goroutines and ownership:
//
//   - Local: writers call WriteResult/WriteFailure from any goroutine; a
//     mutex guards the buffers and files (it is held across the write(2)
//     calls and across the fsync+rename+manifest of a shard close, which
//     happen every few thousand records; the periodic fsync of the open
//     shard runs without it). Open starts one timer goroutine that closes
//     shards older than ShardSeconds and fsyncs every SyncEvery; Close stops
//     and joins it.
//   - S3: Run(ctx, l) is one goroutine owned by the caller; it uploads,
//     then sleeps until Notify or a backoff timer, and returns when ctx is
//     cancelled. Drain runs an upload pass in the caller's goroutine; Run
//     and Drain never upload concurrently (a mutex serialises passes).
package sink
