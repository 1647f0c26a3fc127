package protocol

// ListenFD is the descriptor a plain-host mounter finds its listening control socket at: the
// plugin creates the socket in its state directory (where the unprivileged mounter could not)
// and passes it as the child's first extra file.
const ListenFD = 3

// FaultEnv is a test hook: "<fault>:<text>" makes the mounter misbehave as a hostile medium
// could make a parser do, for requests whose volume ID contains text. Faults: check-panic,
// check-hang, serve-panic, resume-panic (a takeover, ServeArgs.Resume, only); probe-panic, probe-hang and probe-alloc (allocate without end) for the probe of a medium (mounter.ProbeMain) whose
// device path contains text. Never set it outside tests.
const FaultEnv = "CSI_FAT_MOUNTER_FAULT"

// VersionEnv is a test hook: the version a mounter started with it reports (OpBuild) instead of
// its build's, so that a test can stand in a mounter of another version. The plugin passes it
// on to the mounters it starts. Never set it outside tests.
const VersionEnv = "CSI_FAT_MOUNTER_VERSION"
