# The device rehearsal runs in a network namespace whose loopback is down, where Open MPI
# cannot start even one process; the GPU machine has it up. This brings it up (SIOCSIFFLAGS),
# for the rehearsal only: python3 scripts/rehearsal_loopback_up.py && scripts/gpu_check.sh ...
import fcntl, socket, struct
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
ifr = struct.pack("16sH", b"lo", 0)
flags = struct.unpack("16sH", fcntl.ioctl(s, 0x8913, ifr))[1]  # SIOCGIFFLAGS
fcntl.ioctl(s, 0x8914, struct.pack("16sH", b"lo", flags | 1))  # SIOCSIFFLAGS |= IFF_UP
