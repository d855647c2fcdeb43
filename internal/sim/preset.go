package sim

import (
	"fmt"
	"sort"
	"strings"
)

// GPUSpec is a simulated GPU: capacity, bandwidth, compute and what NVML
// would report about it.
type GPUSpec struct {
	Key            string  // preset key, e.g. "rtx-pro-6000"
	Name           string  // NVML device name
	MemoryBytes    float64 // NVML total memory
	BandwidthBytes float64 // peak DRAM bytes per second
	PeakFLOPS      float64 // dense BF16 tensor FLOP/s
	PowerLimitW    float64
	IdlePowerW     float64
	SMClockHz      float64
	MemClockHz     float64
}

// ModelSpec is a simulated dense model in BF16.
type ModelSpec struct {
	Key             string // preset key, e.g. "27b"
	ServedName      string // served_model_name and /v1/models id
	WeightBytes     float64
	KVBytesPerToken float64
	Params          float64 // parameters; 2 FLOPs per parameter per token
	ContextLength   int     // default --context-length
}

const mib = 1 << 20

// gpuPresets returns the built-in GPUs. Memory sizes are what NVML reports,
// bandwidths and BF16 peaks are the data-sheet figures.
func gpuPresets() map[string]GPUSpec {
	return map[string]GPUSpec{
		"rtx-pro-6000": {Key: "rtx-pro-6000", Name: "NVIDIA RTX PRO 6000 Blackwell Server Edition",
			MemoryBytes: 97887 * mib, BandwidthBytes: 1.792e12, PeakFLOPS: 500e12,
			PowerLimitW: 600, IdlePowerW: 85, SMClockHz: 2.43e9, MemClockHz: 14.001e9},
		"h100": {Key: "h100", Name: "NVIDIA H100 80GB HBM3",
			MemoryBytes: 81559 * mib, BandwidthBytes: 3.35e12, PeakFLOPS: 989e12,
			PowerLimitW: 700, IdlePowerW: 70, SMClockHz: 1.98e9, MemClockHz: 2.619e9},
		"h200": {Key: "h200", Name: "NVIDIA H200 141GB HBM3e",
			MemoryBytes: 143771 * mib, BandwidthBytes: 4.8e12, PeakFLOPS: 989e12,
			PowerLimitW: 700, IdlePowerW: 75, SMClockHz: 1.98e9, MemClockHz: 3.201e9},
		"b200": {Key: "b200", Name: "NVIDIA B200 180GB HBM3e",
			MemoryBytes: 183359 * mib, BandwidthBytes: 8e12, PeakFLOPS: 2250e12,
			PowerLimitW: 1000, IdlePowerW: 120, SMClockHz: 1.965e9, MemClockHz: 3.996e9},
	}
}

// modelPresets returns the built-in models (BF16 weights and KV).
func modelPresets() map[string]ModelSpec {
	return map[string]ModelSpec{
		// 64 layers × 8 KV heads × 128 dims × (K and V) × 2 bytes = 256 KiB per token.
		"27b": {Key: "27b", ServedName: "Qwen/Qwen3.6-27B", WeightBytes: 54e9,
			KVBytesPerToken: 262144, Params: 27e9, ContextLength: 32768},
		// 36 layers × 8 KV heads × 128 dims × 2 × 2 bytes ≈ 144 KiB; rounded to 128 KiB as in the roofline note.
		"8b": {Key: "8b", ServedName: "Qwen/Qwen3-8B", WeightBytes: 16e9,
			KVBytesPerToken: 131072, Params: 8e9, ContextLength: 32768},
	}
}

// GPUPreset looks up a GPU by key (rtx-pro-6000, h100, h200, b200).
func GPUPreset(key string) (GPUSpec, error) {
	g, ok := gpuPresets()[strings.ToLower(key)]
	if !ok {
		return GPUSpec{}, fmt.Errorf("unknown gpu %q (one of %s)", key, strings.Join(GPUKeys(), ", "))
	}
	return g, nil
}

// ModelPreset looks up a model by key (27b, 8b).
func ModelPreset(key string) (ModelSpec, error) {
	m, ok := modelPresets()[strings.ToLower(key)]
	if !ok {
		return ModelSpec{}, fmt.Errorf("unknown model %q (one of %s)", key, strings.Join(ModelKeys(), ", "))
	}
	return m, nil
}

// GPUKeys lists the GPU preset keys, sorted.
func GPUKeys() []string { return sortedKeys(gpuPresets()) }

// ModelKeys lists the model preset keys, sorted.
func ModelKeys() []string { return sortedKeys(modelPresets()) }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
