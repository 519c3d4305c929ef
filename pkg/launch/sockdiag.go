package launch

import (
	"encoding/binary"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// The kernel's socket tables in /proc/net/tcp{,6} list every TCP socket:
// on a host that has served many short connections, thousands in
// TIME_WAIT, and the kernel formats each one on every read (milliseconds).
// A sock_diag dump (netlink, NETLINK_SOCK_DIAG, the interface ss(8) uses)
// asked for state LISTEN only walks the listening sockets and nothing
// else; listeningInodes reads the tables only where that dump fails.

// Sizes and offsets of the kernel's sock_diag structures
// (include/uapi/linux/inet_diag.h): struct inet_diag_req_v2 is 8 bytes
// then a struct inet_diag_sockid of 48; struct inet_diag_msg is 4 bytes,
// the sockid (local port first, big-endian), then expires, rqueue,
// wqueue, uid and inode, each a u32.
const (
	diagSockIDLen  = 48
	diagReqLen     = 8 + diagSockIDLen
	diagMsgLen     = 4 + diagSockIDLen + 5*4
	diagMsgPortOff = 4
	diagMsgInoOff  = 4 + diagSockIDLen + 4*4
	// tcpListen is the kernel's TCP_LISTEN (include/net/tcp_states.h).
	tcpListen = 10
)

// diagTimeout bounds the wait for the kernel's answer.
const diagTimeout = 2 * time.Second

// diagListening returns the inodes of the TCP sockets of family
// (AF_INET, AF_INET6) listening on port, from a sock_diag dump.
var diagListening = func(family uint8, port int) (map[uint64]bool, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, fmt.Errorf("sock_diag socket: %w", err)
	}
	defer unix.Close(fd)
	tv := unix.NsecToTimeval(diagTimeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return nil, fmt.Errorf("sock_diag socket: %w", err)
	}
	seq := uint32(os.Getpid())
	req := make([]byte, unix.SizeofNlMsghdr+diagReqLen)
	binary.NativeEndian.PutUint32(req[0:], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	binary.NativeEndian.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	binary.NativeEndian.PutUint32(req[8:], seq)
	body := req[unix.SizeofNlMsghdr:]
	body[0], body[1] = family, unix.IPPROTO_TCP
	binary.NativeEndian.PutUint32(body[4:], 1<<tcpListen)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("sock_diag request: %w", err)
	}
	inodes := map[uint64]bool{}
	buf := make([]byte, 64<<10)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err == unix.EINTR {
			continue // a signal (the runtime's preemption), not the answer: with a receive timeout set, not restarted
		}
		if err != nil {
			return nil, fmt.Errorf("sock_diag answer: %w", err)
		}
		done, err := diagMessages(buf[:n], seq, port, inodes)
		if err != nil || done {
			return inodes, err
		}
	}
}

// diagMessages reads one datagram of a sock_diag dump into inodes (those
// listening on port) and says whether the dump is over.
func diagMessages(b []byte, seq uint32, port int, inodes map[uint64]bool) (bool, error) {
	for len(b) >= unix.SizeofNlMsghdr {
		l := int(binary.NativeEndian.Uint32(b[0:]))
		typ := binary.NativeEndian.Uint16(b[4:])
		if l < unix.SizeofNlMsghdr || l > len(b) {
			return false, fmt.Errorf("sock_diag answer: a message of %d bytes in %d", l, len(b))
		}
		msg := b[unix.SizeofNlMsghdr:l]
		if binary.NativeEndian.Uint32(b[8:]) == seq {
			switch typ {
			case unix.NLMSG_DONE:
				return true, nil
			case unix.NLMSG_ERROR:
				if len(msg) < 4 {
					return false, fmt.Errorf("sock_diag answer: a short error message")
				}
				return false, fmt.Errorf("sock_diag answer: %w", unix.Errno(-int32(binary.NativeEndian.Uint32(msg))))
			case unix.SOCK_DIAG_BY_FAMILY:
				if len(msg) < diagMsgLen {
					return false, fmt.Errorf("sock_diag answer: a socket of %d bytes, want %d", len(msg), diagMsgLen)
				}
				if int(binary.BigEndian.Uint16(msg[diagMsgPortOff:])) == port {
					inodes[uint64(binary.NativeEndian.Uint32(msg[diagMsgInoOff:]))] = true
				}
			}
		}
		l = (l + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1)
		if l > len(b) {
			break
		}
		b = b[l:]
	}
	return false, nil
}
