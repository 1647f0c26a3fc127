package fatvol

// Hold writes everything back and makes it durable, then calls fn while no operation can reach
// the volume: every call, the background writer's included, waits until fn returns. What the
// device holds during fn is the volume as a crash at that moment would leave it, with nothing
// lost that any operation had returned from: a snapshot copies the device then. The device is not
// a cleanly closed volume: its dirty bit is set (while open for writing), files open for writing
// may own preallocated clusters past their size, and files removed while open still hold their
// clusters; a check of the copy repairs those, as after a crash. A failing write-back fails Hold
// before fn runs.
func (v *Volume) Hold(fn func() error) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.usable(); err != nil {
		return err
	}
	if err := v.syncLocked(); err != nil {
		return err
	}
	return fn()
}
