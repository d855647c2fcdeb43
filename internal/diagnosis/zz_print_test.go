package diagnosis

import (
	"encoding/json"
	"testing"

	"github.com/gend-dev/gend/api"
)

func TestPrintSeed(t *testing.T) {
	servers, gpus, retr := seedFleet(2, ptr(0.78))
	d := Diagnose(Input{Servers: servers, GPUs: gpus, RetractionsPerMin: retr, Model: qwen27B, PendingWork: true})
	b, _ := json.MarshalIndent(d, "", "  ")
	t.Log(string(b))
	d = Diagnose(Input{Servers: []api.Server{server("gpu0", 64, 200, 64, 0.35, 800000, 2900)}, GPUs: map[string][]api.GPU{"gpu0": {h200(0, ptr(0.45))}}, Model: llama8B, PendingWork: true})
	b, _ = json.MarshalIndent(d, "", "  ")
	t.Log(string(b))
}
