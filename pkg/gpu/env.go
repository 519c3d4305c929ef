package gpu

// FakeDirEnv is the environment variable through which processes learn the
// fake GPU backend's directory (fakegpu.EnvDir is the same name): the
// controller exports it to an attempt's children without linking the fake
// backend.
const FakeDirEnv = "WARDEN_FAKE_GPU_DIR"
