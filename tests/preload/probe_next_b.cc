// The next definition of probe_value() (driver_probe's rtld-next case).
extern "C" int probe_value() { return 42; }
// Referenced by driver_probe so the linker keeps this library in its NEEDED list.
extern "C" int probe_next_b_loaded() { return 1; }
