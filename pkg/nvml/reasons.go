package nvml

// clockEventReasons names NVML's clocks-event (throttle) bits, in bit order.
// The values match nvml.ClocksEventReason* / nvml.ClocksThrottleReason*; they
// are repeated here so the collector builds without cgo.
var clockEventReasons = [...]struct {
	Bit  uint64
	Name string
}{
	{1, "gpu_idle"},
	{2, "applications_clocks_setting"},
	{4, "sw_power_cap"},
	{8, "hw_slowdown"},
	{16, "sync_boost"},
	{32, "sw_thermal_slowdown"},
	{64, "hw_thermal_slowdown"},
	{128, "hw_power_brake_slowdown"},
	{256, "display_clock_setting"},
	{512, "board_limit"},
	{1024, "reliability"},
}

// ClockEventNames returns the names of the bits set in an NVML clocks-event
// reasons bitmask (e.g. 4 → ["sw_power_cap"]). Unknown bits are ignored.
func ClockEventNames(mask uint64) []string {
	var names []string
	for _, r := range clockEventReasons {
		if mask&r.Bit != 0 {
			names = append(names, r.Name)
		}
	}
	return names
}
