package mkfs

// mkfs.fat's boot code: a few real-mode instructions that print a message, wait for a key and
// reboot (int 19h). The instructions are written out byte for byte from their assembly below
// (dosfstools marks this code public domain); only the message address depends on where the
// code sits, which differs between the FAT12/16 and the FAT32 boot sector.
var bootCodeInstructions = []byte{
	0x0e,             // push cs
	0x1f,             // pop ds
	0xbe, 0x00, 0x00, // mov si, offset message (patched by bootCode)
	0xac,       // write_msg: lodsb
	0x22, 0xc0, // and al, al
	0x74, 0x0b, // jz key_press
	0x56,       // push si
	0xb4, 0x0e, // mov ah, 0eh
	0xbb, 0x07, 0x00, // mov bx, 0007h
	0xcd, 0x10, // int 10h
	0x5e,       // pop si
	0xeb, 0xf0, // jmp write_msg
	0x32, 0xe4, // key_press: xor ah, ah
	0xcd, 0x16, // int 16h
	0xcd, 0x19, // int 19h
	0xeb, 0xfe, // foo: jmp foo
}

const bootMessage = "This is not a bootable disk.  Please insert a bootable floppy and\r\n" +
	"press any key to try again ... \r\n"

// Where the code goes: right after the extended boot record, up to the 0x55AA signature.
const (
	bootCodeOffsetFAT16 = 62 // 0x3E
	bootCodeOffsetFAT32 = 90 // 0x5A
	bootCodeEnd         = 510
	biosLoadAddress     = 0x7c00
	messageAddressAt    = 3 // offset of the mov si immediate in the code
)

// writeBootCode puts the jump, the code and the NUL-terminated message into the 512-byte boot
// sector p, for the layout that starts its code at codeOffset.
func writeBootCode(p []byte, codeOffset int) {
	p[0], p[1], p[2] = 0xeb, byte(codeOffset-2), 0x90 // jmp short code; nop
	code := p[codeOffset:bootCodeEnd]
	clear(code)
	n := copy(code, bootCodeInstructions)
	msgAddr := biosLoadAddress + codeOffset + n
	code[messageAddressAt] = byte(msgAddr)
	code[messageAddressAt+1] = byte(msgAddr >> 8)
	copy(code[n:len(code)-1], bootMessage) // always leave the last byte as a terminator
}
