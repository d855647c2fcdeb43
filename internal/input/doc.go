// Package input reads a job's JSONL input as a stream of requests.
//
// A line is one JSON object in one of the forms of DESIGN.md ("Jobs"):
// OpenAI Batch ({"custom_id","method","url","body"}), chat
// ({"custom_id"|"id","messages"}), ShareGPT ({"id","conversations"}) or
// completion ({"custom_id"|"id","prompt"}). Each non-empty line becomes
// exactly one Item (a request body ready to send) or one BadLine (for
// errors.jsonl); empty lines are skipped and not counted. .gz and .zst
// files are recognised by their magic bytes and decompressed on the fly.
//
// Request bodies: the job's params come first, the line's own request
// fields override them. For chat and completion lines only known request
// fields pass (see passField); dataset metadata is dropped. "model" comes
// from Options.Model, or, when that is empty, from an OpenAI Batch body.
// "stream", "stream_options", "rid" and "request_id" are never copied: the
// backend sets them. Chat bodies always carry max_completion_tokens when a
// limit is known (SGLang and vLLM bound the KV cache by it); completion
// bodies carry max_tokens. A limit on the line wins over one in the params.
//
// Identity: a line's id is "custom_id", else "id"; an integer id becomes
// its decimal string. The first line with an id is processed, every later
// one is a duplicate_custom_id BadLine. Duplicates are found across the
// whole file, in file order, also when sharded (every shard hashes every
// line's id, so exactly one shard reports each duplicate) or shuffled (the
// shuffle's pre-pass finds them), and also through resumed lines (Skip):
// those still register their id but are never reported again. A line whose
// id can be read registers it even when the line is otherwise invalid, so
// each id ends up exactly once in shards ∪ errors.
//
// Text is passed through as the input has it: invalid UTF-8 inside a JSON
// string is not repaired here (the server will reject that request).
//
// Memory is bounded whatever the file size: lines are streamed through a
// fixed buffer (a line longer than MaxLineBytes is a BadLine and is never
// held whole), duplicate custom_ids are found with a set of 64-bit hashes
// (idSet: ~10.7 bytes per line), and a shuffle keeps 12 bytes and a bit
// per line of the shard and reads lines back by offset.
//
// Concurrency: a Reader is used by one goroutine. It starts none itself,
// except that reading a .zst file runs the zstd decoder's goroutines, which
// the Reader owns and Close stops. Count opens and closes its own file and
// may run at the same time as a Reader on the same path.
package input
