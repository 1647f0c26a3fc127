package volume

import (
	"fmt"
	"strconv"

	"github.com/csi-fat/csi-fat/fatvol/ondisk"
)

// parseCodePage reads the codepage parameter: one of the code pages the engine offers. 437, the
// default, is recorded as 0 so that both spellings are one volume.
func parseCodePage(val string) (int, error) {
	n, err := strconv.Atoi(val)
	if err != nil {
		return 0, fmt.Errorf("want a code page number (%s)", ondisk.CodePageList())
	}
	if _, err := ondisk.LookupCodePage(n); err != nil {
		return 0, err
	}
	if n == ondisk.DefaultCodePage {
		return 0, nil
	}
	return n, nil
}

// stageFlags are the mount flags a volume is staged with: its codepage parameter as the mount
// option codepage=, then the flags of the request, which may override it.
func (p Params) StageFlags(flags []string) []string {
	if p.CodePage == 0 {
		return flags
	}
	return append([]string{"codepage=" + strconv.Itoa(p.CodePage)}, flags...)
}
