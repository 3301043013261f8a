//! Where the MCP server listens (a loopback address, or a Unix socket whose peers the kernel
//! names), and what a connection may cost before its credential is checked: a bounded number
//! of connections, each of which must bring a whole request head, of a bounded size, within a
//! bounded time of opening or of its last answer, or is closed (docs/ROS.md, "Bounds on MCP
//! clients").
//!
//! hyper (under axum) has no such bound unless it is given a timer, which `axum::serve` does not
//! give it, so the bound is kept here, around the connection: a connection is *idle* while no
//! request of it is being served (from its first byte until a handler has it, and again from
//! when its last answer is sent), and an idle connection reads at most [`HttpOptions::max_head`]
//! bytes and only until [`HttpOptions::request_read`] after it became idle. A long answer
//! (an SSE stream that stays open) is a request being served, not idleness.
//!
//! [`HttpOptions::max_head`]: super::HttpOptions::max_head
//! [`HttpOptions::request_read`]: super::HttpOptions::request_read

use std::io;
use std::net::SocketAddr;
use std::os::unix::fs::{DirBuilderExt as _, FileTypeExt as _, MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker, ready};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody as _};
use axum::extract::connect_info::{ConnectInfo, Connected};
use axum::serve::{IncomingStream, Listener};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::McpServeError;

/// The longest Unix socket path (`sun_path` is 108 bytes with its terminating zero).
pub const MAX_SOCKET_PATH: usize = 107;

/// Where the server listens: a loopback address (clients bring bearer tokens), or a Unix socket
/// (`unix:PATH`; the kernel says which user each peer runs as).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Listen {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl std::str::FromStr for Listen {
    type Err = String;

    fn from_str(text: &str) -> Result<Listen, String> {
        let text = text.trim();
        if let Some(path) = text.strip_prefix("unix:") {
            if path.is_empty() {
                return Err("unix: needs a path (unix:/run/user/1000/sion/mcp.sock)".into());
            }
            if path.len() > MAX_SOCKET_PATH || path.contains('\0') {
                return Err(format!(
                    "{path:?}: a Unix socket's path is at most {MAX_SOCKET_PATH} bytes, with no NUL"
                ));
            }
            return Ok(Listen::Unix(path.into()));
        }
        let addr: SocketAddr = text
            .parse()
            .map_err(|e| format!("{text:?} is not an address like 127.0.0.1:8765, nor unix:PATH ({e})"))?;
        if !addr.ip().is_loopback() {
            return Err(format!(
                "{addr} is not a loopback address (tokens travel in clear over HTTP; put a TLS proxy in front, or serve on unix:PATH)"
            ));
        }
        Ok(Listen::Tcp(addr))
    }
}

impl std::fmt::Display for Listen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Listen::Tcp(a) => write!(f, "{a}"),
            Listen::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

impl From<SocketAddr> for Listen {
    fn from(a: SocketAddr) -> Listen {
        Listen::Tcp(a)
    }
}

impl Listen {
    /// Where a client reaches the server, for people.
    pub fn endpoint(&self) -> String {
        match self {
            Listen::Tcp(a) => format!("http://{a}/mcp"),
            Listen::Unix(p) => format!("http://localhost/mcp over the Unix socket {}", p.display()),
        }
    }
}

/// How a connection came: over TCP, or over the Unix socket from a peer of this uid (`None`:
/// the kernel would not say, and such a peer is refused).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Door {
    Tcp,
    Unix { uid: Option<u32> },
}

/// What every request of a connection carries (as axum's `ConnectInfo`): its door, and its
/// clock, which the request's service holds busy while it is served.
#[derive(Clone)]
pub(crate) struct ConnInfo {
    pub(crate) door: Door,
    clock: Arc<Clock>,
}

impl<L: Listener> Connected<IncomingStream<'_, Bounded<L>>> for ConnInfo {
    fn connect_info(stream: IncomingStream<'_, Bounded<L>>) -> Self {
        stream.io().info.clone()
    }
}

/// Whether a connection is idle (no request of it being served) and since when, and how many
/// bytes it has read while idle: what its reads are bounded by.
struct Clock(Mutex<Tick>);

struct Tick {
    busy: usize,
    since: tokio::time::Instant,
    head: usize,
    /// The connection's reader, woken when the connection becomes idle so that its deadline
    /// starts to run even if the reader was waiting on the socket, undeadlined, when it did.
    reader: Option<Waker>,
}

impl Clock {
    fn new() -> Arc<Clock> {
        Arc::new(Clock(Mutex::new(Tick {
            busy: 0,
            since: tokio::time::Instant::now(),
            head: 0,
            reader: None,
        })))
    }

    fn tick(&self) -> std::sync::MutexGuard<'_, Tick> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A request of this connection is being served until the guard is dropped.
    fn begin(self: &Arc<Self>) -> Busy {
        let mut t = self.tick();
        t.busy += 1;
        t.head = 0;
        Busy(Arc::clone(self))
    }
}

/// A request being served: while any is, its connection is not idle.
pub(crate) struct Busy(Arc<Clock>);

impl Drop for Busy {
    fn drop(&mut self) {
        let reader = {
            let mut t = self.0.tick();
            t.busy = t.busy.saturating_sub(1);
            if t.busy > 0 {
                return;
            }
            t.since = tokio::time::Instant::now();
            t.head = 0;
            t.reader.take()
        };
        if let Some(w) = reader {
            w.wake();
        }
    }
}

/// A connection, with its place among the connections (given back when it closes) and the
/// bounds on what it reads while idle.
pub(crate) struct Conn<S> {
    io: S,
    info: ConnInfo,
    request_read: Duration,
    max_head: usize,
    deadline: Pin<Box<tokio::time::Sleep>>,
    _place: tokio::sync::OwnedSemaphorePermit,
}

impl<S: AsyncRead + Unpin> AsyncRead for Conn<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let idle = {
            let mut t = this.info.clock.tick();
            if !t.reader.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                t.reader = Some(cx.waker().clone());
            }
            (t.busy == 0).then_some((t.since, t.head))
        };
        let Some((since, head)) = idle else {
            return Pin::new(&mut this.io).poll_read(cx, buf);
        };
        let deadline = since + this.request_read;
        if this.deadline.deadline() != deadline {
            this.deadline.as_mut().reset(deadline);
        }
        if this.deadline.as_mut().poll(cx).is_ready() {
            tracing::debug!("an MCP connection sent no whole request within {:?}: closed", this.request_read);
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "no whole request head within the bound",
            )));
        }
        let room = this.max_head.saturating_sub(head);
        if room == 0 {
            tracing::debug!("an MCP connection sent a request head over {} bytes: closed", this.max_head);
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a request head over the bound",
            )));
        }
        // Read through a buffer of at most `room` bytes, so that an idle connection never
        // hands hyper more than the bound (hyper's own is ~400 KiB).
        let mut scratch = [0u8; 8192];
        let want = room.min(buf.remaining()).min(scratch.len());
        let mut part = ReadBuf::new(&mut scratch[..want]);
        ready!(Pin::new(&mut this.io).poll_read(cx, &mut part))?;
        let got = part.filled();
        buf.put_slice(got);
        let mut t = this.info.clock.tick();
        t.head = t.head.saturating_add(got.len());
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Conn<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// A listener whose connections are bounded: at most `places` open at once (past it, the next
/// is not accepted until one closes: it waits in the kernel's queue, costing nothing here),
/// each a [`Conn`].
pub(crate) struct Bounded<L: Listener> {
    inner: L,
    places: Arc<tokio::sync::Semaphore>,
    request_read: Duration,
    max_head: usize,
    door: fn(&L::Io) -> Door,
}

impl<L: Listener> Bounded<L> {
    pub(crate) fn new(
        inner: L,
        max_connections: usize,
        request_read: Duration,
        max_head: usize,
        door: fn(&L::Io) -> Door,
    ) -> Self {
        let places = Arc::new(tokio::sync::Semaphore::new(max_connections.max(1)));
        Self { inner, places, request_read, max_head, door }
    }
}

/// A TCP connection's door.
pub(crate) fn tcp_door(_: &tokio::net::TcpStream) -> Door {
    Door::Tcp
}

/// A Unix connection's door: the peer's uid, as the kernel recorded it when it connected.
pub(crate) fn unix_door(io: &tokio::net::UnixStream) -> Door {
    Door::Unix { uid: io.peer_cred().ok().map(|c| c.uid()) }
}

impl<L: Listener> Listener for Bounded<L> {
    type Io = Conn<L::Io>;
    type Addr = L::Addr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let place = loop {
            // The semaphore is never closed; were it, no connection would be taken again.
            match self.places.clone().acquire_owned().await {
                Ok(p) => break p,
                Err(_) => std::future::pending::<()>().await,
            }
        };
        let (io, addr) = self.inner.accept().await;
        let info = ConnInfo { door: (self.door)(&io), clock: Clock::new() };
        let deadline = Box::pin(tokio::time::sleep(self.request_read));
        let conn = Conn {
            io,
            info,
            request_read: self.request_read,
            max_head: self.max_head,
            deadline,
            _place: place,
        };
        (conn, addr)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// The outermost middleware: the request's connection is busy from here until its answer has
/// been sent whole (or dropped), so an answer streamed for minutes is not idleness.
pub(crate) async fn watch(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let busy = request.extensions().get::<ConnectInfo<ConnInfo>>().map(|c| c.0.clock.begin());
    let response = next.run(request).await;
    match busy {
        Some(busy) if !response.body().is_end_stream() => {
            let (mut parts, body) = response.into_parts();
            // A body of known length keeps it (Content-Length, not chunks): simple clients of
            // `GET /checkpoint` read exactly the note.
            if let Some(n) = body.size_hint().exact() {
                parts.headers.insert(axum::http::header::CONTENT_LENGTH, n.into());
            }
            let tail = Tail { body, chunk: Bytes::new(), _busy: busy };
            let stream = tokio_util::codec::FramedRead::new(tail, tokio_util::codec::BytesCodec::new());
            axum::response::Response::from_parts(parts, Body::from_stream(stream))
        }
        _ => response,
    }
}

/// An answer's body, read out, holding its connection busy until it is read to its end or
/// dropped (the connection closed).
struct Tail {
    body: Body,
    chunk: Bytes,
    _busy: Busy,
}

impl AsyncRead for Tail {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if !this.chunk.is_empty() {
                let n = this.chunk.len().min(buf.remaining());
                buf.put_slice(&this.chunk.split_to(n));
                return Poll::Ready(Ok(()));
            }
            match ready!(Pin::new(&mut this.body).poll_frame(cx)) {
                None => return Poll::Ready(Ok(())),
                Some(Err(e)) => return Poll::Ready(Err(io::Error::other(e))),
                // Trailers: MCP has none; nothing to carry.
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        this.chunk = data;
                    }
                }
            }
        }
    }
}

/// The Unix socket being served: removed when the server stops, if it is still the one made.
pub(crate) struct Socket {
    path: PathBuf,
    id: (u64, u64),
}

impl Drop for Socket {
    fn drop(&mut self) {
        if std::fs::symlink_metadata(&self.path).is_ok_and(|m| (m.dev(), m.ino()) == self.id) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Bind the Unix socket at `path`: in a directory only this server's user (uid `me`) or root
/// can change, made 0700 when absent (0711 when `others` may connect: they must reach the
/// socket), the socket itself 0600 (0666 when `others`: then the peer check alone keeps the
/// rest out). A socket left by a server that is gone is replaced; one still answered is not.
pub(crate) fn bind_unix(
    path: &Path,
    others: bool,
    me: u32,
) -> Result<(tokio::net::UnixListener, Socket), McpServeError> {
    let refuse = |why: String| McpServeError::Socket(path.to_path_buf(), why);
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let dir_mode = if others { 0o711 } else { 0o700 };
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let io = |e| McpServeError::Io(format!("making {}", dir.display()), e);
            std::fs::DirBuilder::new().recursive(true).mode(dir_mode).create(dir).map_err(io)?;
            // The umask may have taken bits the mode asked for; it cannot have added any.
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(dir_mode)).map_err(io)?;
        }
        Err(e) => return Err(McpServeError::Io(format!("the socket's directory {}", dir.display()), e)),
        Ok(m) => {
            let mode = m.permissions().mode() & 0o7777;
            if !m.is_dir() || mode & 0o022 != 0 || (m.uid() != me && m.uid() != 0) {
                return Err(refuse(format!(
                    "its directory {} (uid {}, mode {mode:04o}) can be changed by others, who could put their own socket in its place: use a directory of its own (unix:{}/sion/mcp.sock is made {dir_mode:04o} when absent), or `chmod go-w {}`",
                    dir.display(),
                    m.uid(),
                    dir.display(),
                    dir.display()
                )));
            }
            if others && mode & 0o011 == 0 {
                tracing::warn!(
                    "the users allowed on {} may not reach it: its directory {} is mode {mode:04o} (`chmod 711 {}`)",
                    path.display(),
                    dir.display(),
                    dir.display()
                );
            }
        }
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(refuse("another server answers on it; stop it, or choose another path".into()));
            }
            std::fs::remove_file(path)
                .map_err(|e| McpServeError::Io(format!("removing the stale socket {}", path.display()), e))?;
        }
        Ok(_) => return Err(refuse("exists and is not a socket: remove it, or choose another path".into())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(McpServeError::Io(format!("{}", path.display()), e)),
    }
    let io = |e| McpServeError::Io(format!("listening on {}", path.display()), e);
    let listener = tokio::net::UnixListener::bind(path).map_err(io)?;
    let mode = if others { 0o666 } else { 0o600 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io)?;
    let m = std::fs::symlink_metadata(path).map_err(io)?;
    Ok((listener, Socket { path: path.to_path_buf(), id: (m.dev(), m.ino()) }))
}

#[cfg(test)]
mod tests {
    use super::Listen;

    #[test]
    fn listen_parses_loopback_and_unix_only() {
        assert_eq!(
            "127.0.0.1:8765".parse::<Listen>(),
            Ok(Listen::Tcp("127.0.0.1:8765".parse().expect("addr")))
        );
        assert_eq!(
            "unix:/run/sion/mcp.sock".parse::<Listen>(),
            Ok(Listen::Unix("/run/sion/mcp.sock".into()))
        );
        assert_eq!(Listen::Unix("/a/b".into()).to_string(), "unix:/a/b");
        for bad in
            ["0.0.0.0:8765", "10.0.0.1:80", "localhost", "unix:", &format!("unix:/{}", "x".repeat(120))]
        {
            assert!(bad.parse::<Listen>().is_err(), "{bad}");
        }
    }
}
