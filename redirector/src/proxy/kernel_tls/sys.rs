//! The syscalls of kernel TLS: the `tls` upper-layer protocol on a TCP socket, the
//! session keys handed to it, and records whose type is not application data.

use std::{io, mem, os::fd::RawFd};

use rustls::{CipherSuite, ConnectionTrafficSecrets};
use tokio::io::ReadBuf;

/// TLS record content types (RFC 8446 §5.1).
pub const ALERT: u8 = 21;
pub const HANDSHAKE: u8 = 22;
pub const APPLICATION_DATA: u8 = 23;

/// Which way a key works on the socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    Send,
    Receive,
}

impl Way {
    fn optname(self) -> libc::c_int {
        match self {
            Way::Send => libc::TLS_TX,
            Way::Receive => libc::TLS_RX,
        }
    }
}

/// Attaches the `tls` upper-layer protocol to a connected TCP socket. Until keys are
/// set (`set_key`) the socket still reads and writes plain TCP.
pub fn attach_ulp(fd: RawFd) -> io::Result<()> {
    const NAME: &[u8] = b"tls";
    // SAFETY: the pointer and length describe `NAME`, a static the kernel only reads.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_TCP,
            libc::TCP_ULP,
            NAME.as_ptr().cast(),
            NAME.len() as libc::socklen_t,
        )
    };
    check(rc)
}

/// The kernel's description of one direction's TLS 1.3 key, as `setsockopt(SOL_TLS)`
/// takes it. The 12-byte IV rustls gives is split as the kernel wants it: AES-GCM takes
/// its first 4 bytes as the salt, ChaCha20-Poly1305 takes all 12 as the IV.
#[derive(Clone, Copy)]
pub enum CryptoInfo {
    Aes128Gcm(libc::tls12_crypto_info_aes_gcm_128),
    Aes256Gcm(libc::tls12_crypto_info_aes_gcm_256),
    Chacha20Poly1305(libc::tls12_crypto_info_chacha20_poly1305),
}

impl CryptoInfo {
    /// TLS 1.3 keys for the record with sequence number `seq` onwards.
    pub fn tls13(seq: u64, secrets: &ConnectionTrafficSecrets) -> Option<Self> {
        let rec_seq = seq.to_be_bytes();
        let info = |cipher_type| libc::tls_crypto_info {
            version: libc::TLS_1_3_VERSION,
            cipher_type,
        };
        Some(match secrets {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv } => {
                let (salt, iv) = iv.as_ref().split_at(4);
                CryptoInfo::Aes128Gcm(libc::tls12_crypto_info_aes_gcm_128 {
                    info: info(libc::TLS_CIPHER_AES_GCM_128),
                    iv: iv.try_into().ok()?,
                    key: key.as_ref().try_into().ok()?,
                    salt: salt.try_into().ok()?,
                    rec_seq,
                })
            }
            ConnectionTrafficSecrets::Aes256Gcm { key, iv } => {
                let (salt, iv) = iv.as_ref().split_at(4);
                CryptoInfo::Aes256Gcm(libc::tls12_crypto_info_aes_gcm_256 {
                    info: info(libc::TLS_CIPHER_AES_GCM_256),
                    iv: iv.try_into().ok()?,
                    key: key.as_ref().try_into().ok()?,
                    salt: salt.try_into().ok()?,
                    rec_seq,
                })
            }
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => {
                CryptoInfo::Chacha20Poly1305(libc::tls12_crypto_info_chacha20_poly1305 {
                    info: info(libc::TLS_CIPHER_CHACHA20_POLY1305),
                    iv: iv.as_ref().try_into().ok()?,
                    key: key.as_ref().try_into().ok()?,
                    salt: [],
                    rec_seq,
                })
            }
            _ => return None,
        })
    }

    /// A key of zeros for each TLS 1.3 cipher, to learn which ones the kernel takes.
    pub fn probes() -> [(CipherSuite, CryptoInfo); 3] {
        let info = |cipher_type| libc::tls_crypto_info {
            version: libc::TLS_1_3_VERSION,
            cipher_type,
        };
        [
            (
                CipherSuite::TLS13_AES_128_GCM_SHA256,
                CryptoInfo::Aes128Gcm(libc::tls12_crypto_info_aes_gcm_128 {
                    info: info(libc::TLS_CIPHER_AES_GCM_128),
                    iv: [0; 8],
                    key: [0; 16],
                    salt: [0; 4],
                    rec_seq: [0; 8],
                }),
            ),
            (
                CipherSuite::TLS13_AES_256_GCM_SHA384,
                CryptoInfo::Aes256Gcm(libc::tls12_crypto_info_aes_gcm_256 {
                    info: info(libc::TLS_CIPHER_AES_GCM_256),
                    iv: [0; 8],
                    key: [0; 32],
                    salt: [0; 4],
                    rec_seq: [0; 8],
                }),
            ),
            (
                CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
                CryptoInfo::Chacha20Poly1305(libc::tls12_crypto_info_chacha20_poly1305 {
                    info: info(libc::TLS_CIPHER_CHACHA20_POLY1305),
                    iv: [0; 12],
                    key: [0; 32],
                    salt: [],
                    rec_seq: [0; 8],
                }),
            ),
        ]
    }

    /// Hands the key to the kernel for one direction of the socket.
    pub fn set(&self, fd: RawFd, way: Way) -> io::Result<()> {
        match self {
            CryptoInfo::Aes128Gcm(info) => set_key(fd, way, info),
            CryptoInfo::Aes256Gcm(info) => set_key(fd, way, info),
            CryptoInfo::Chacha20Poly1305(info) => set_key(fd, way, info),
        }
    }

    #[cfg(test)]
    pub fn parts(&self) -> (&[u8], &[u8], &[u8], [u8; 8]) {
        match self {
            CryptoInfo::Aes128Gcm(i) => (&i.key, &i.salt, &i.iv, i.rec_seq),
            CryptoInfo::Aes256Gcm(i) => (&i.key, &i.salt, &i.iv, i.rec_seq),
            CryptoInfo::Chacha20Poly1305(i) => (&i.key, &i.salt, &i.iv, i.rec_seq),
        }
    }
}

fn set_key<T>(fd: RawFd, way: Way, info: &T) -> io::Result<()> {
    // SAFETY: `info` is one of the kernel's `tls12_crypto_info_*` structs (repr(C), from
    // the libc crate), valid for reads of its size for the whole call.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_TLS,
            way.optname(),
            std::ptr::from_ref(info).cast(),
            mem::size_of::<T>() as libc::socklen_t,
        )
    };
    check(rc)
}

/// Room for one control message carrying the record type (one byte).
const CMSG_SPACE: usize = 32;

/// Reads into `out`'s unfilled part from a socket with kernel TLS receive keys: the
/// bytes of records of one content type (the kernel joins consecutive data records;
/// a control record comes alone, or in parts when it did not fit). Returns how many
/// bytes, now initialized in `out` but not marked filled, and their content type
/// (`None` when the kernel named none: it read no record, the end of the stream).
pub fn recv_record(fd: RawFd, out: &mut ReadBuf<'_>) -> io::Result<(usize, Option<u8>)> {
    let mut control = [0u64; CMSG_SPACE / 8];
    // SAFETY: the memory is only handed to the kernel, which writes to it and never
    // reads it, so it may be uninitialized.
    let unfilled = unsafe { out.unfilled_mut() };
    let mut iov = libc::iovec {
        iov_base: unfilled.as_mut_ptr().cast(),
        iov_len: unfilled.len(),
    };
    // SAFETY: a zeroed msghdr is a valid empty one; the fields set below point into
    // `iov`, `unfilled` and `control`, which outlive the call.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = mem::size_of_val(&control) as _;
    // SAFETY: `msg` describes writable memory owned by this frame or by `out`.
    let n = unsafe { libc::recvmsg(fd, &raw mut msg, 0) };
    let n = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
    // SAFETY: the kernel wrote `n` bytes at the start of the unfilled part.
    unsafe { out.assume_init(n) };
    // Every record read names its type, application data included.
    let mut record_type = None;
    // SAFETY: the CMSG_* macros walk `control` within `msg_controllen`, as the kernel
    // filled it in; the data of a TLS_GET_RECORD_TYPE message is one byte.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&raw const msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_TLS && (*cmsg).cmsg_type == libc::TLS_GET_RECORD_TYPE
            {
                record_type = Some(*libc::CMSG_DATA(cmsg));
            }
            cmsg = libc::CMSG_NXTHDR(&raw const msg, cmsg);
        }
    }
    Ok((n, record_type))
}

/// Sends `payload` as one record of `record_type` (an alert, for close_notify).
pub fn send_record(fd: RawFd, record_type: u8, payload: &[u8]) -> io::Result<usize> {
    let mut control = [0u64; CMSG_SPACE / 8];
    let mut iov = libc::iovec {
        iov_base: payload.as_ptr().cast_mut().cast(),
        iov_len: payload.len(),
    };
    // SAFETY: as in `recv_record`; the kernel only reads `payload` through `iov`.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE(1) fits in `control` (32 bytes); the header and its one byte
    // of data are written within it.
    unsafe {
        msg.msg_controllen = libc::CMSG_SPACE(1) as _;
        let cmsg = libc::CMSG_FIRSTHDR(&raw const msg);
        (*cmsg).cmsg_level = libc::SOL_TLS;
        (*cmsg).cmsg_type = libc::TLS_SET_RECORD_TYPE;
        (*cmsg).cmsg_len = libc::CMSG_LEN(1) as _;
        *libc::CMSG_DATA(cmsg) = record_type;
    }
    // SAFETY: `msg` points at memory owned by this frame for the whole call.
    let n = unsafe { libc::sendmsg(fd, &raw const msg, libc::MSG_NOSIGNAL) };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
