package volume

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The look-ups and the lock every operation on a volume starts with, answered with the gRPC
// codes the CSI spec names: the node's CSI services pass them on as they are.

// OwnID parses a volume ID and checks that it names a volume of the node named node. An empty
// ID is InvalidArgument (the field is required); any other ID that does not parse is one this
// driver could never have issued, so it names a volume that does not exist: NotFound, as the
// spec has it for a missing volume. Such an ID never yields a name, so it never reaches a file
// path.
func OwnID(volumeID, node string) (ID, error) {
	if volumeID == "" {
		return ID{}, status.Error(codes.InvalidArgument, "volume ID is missing")
	}
	id, err := ParseID(volumeID)
	if err != nil {
		return ID{}, status.Errorf(codes.NotFound, "volume %q does not exist: %v", volumeID, err)
	}
	if id.Node != node {
		return id, status.Errorf(codes.NotFound, "volume %s lives on node %s, this is node %s", volumeID, id.Node, node)
	}
	return id, nil
}

// Record returns a copy of the volume's record, or NotFound. It takes the store's mutex.
func (s *Store) Record(id ID) (Record, error) {
	s.Lock()
	defer s.Unlock()
	v, ok := s.Volumes[id.Name]
	if !ok || v.ID != id.String() {
		return Record{}, status.Errorf(codes.NotFound, "volume %s does not exist", id)
	}
	return *v, nil
}

// Take takes the named lock for op and returns what releases it, or answers Aborted while
// another operation holds it.
func (f *Locks) Take(name, op string) (unlock func(), err error) {
	if ok, holder := f.TryLock(name, op); !ok {
		return nil, status.Errorf(codes.Aborted, "an operation on volume %s is in flight: %s", name, holder)
	}
	return func() { f.Unlock(name) }, nil
}
