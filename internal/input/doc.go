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
