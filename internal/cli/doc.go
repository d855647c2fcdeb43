// Package cli is genctl: it parses the command line, calls gend's REST API
// through api.Client and formats the answers (-o table: human tables;
// -o json: the API's JSON as it came). It holds no business logic.
//
// Everything runs on the caller's goroutine: Run starts no goroutines of its
// own (net/http's transport has its own). `watch` polls on a ticker and
// returns when the job ends, when its context is done, or after
// maxPollFailures polls in a row could not reach gend. Only cmd/genctl calls
// os.Exit, with the code Main returns.
package cli
