package mounters

import (
	"errors"
	"fmt"
	"os"

	"github.com/csi-fat/csi-fat/mounter/protocol"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
)

// mounterOptions is the option string a mounter serves with: the owner, group and masks this
// process would default to (the mounter runs as another user with its own umask), then opts's.
func ServeOptions(optString string) string {
	umask := unix.Umask(0)
	unix.Umask(umask)
	return fmt.Sprintf("uid=%d,gid=%d,umask=%03o,%s", os.Geteuid(), os.Getegid(), umask&0o777, optString)
}

// mounterCode is the gRPC code for a mounter's failure during staging.
func StagingCode(err error) codes.Code {
	var re *protocol.RemoteError
	if errors.As(err, &re) {
		switch re.Code {
		case protocol.CodeNotFAT:
			return codes.FailedPrecondition
		case protocol.CodeInvalid:
			return codes.InvalidArgument
		}
		return codes.Internal
	}
	return codes.FailedPrecondition // it died or hung: the medium is suspect
}
