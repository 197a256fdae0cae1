//! The loopback ports test processes listen on, chosen outside the
//! kernel's ephemeral range so that no outgoing connection can take one
//! between the test finding it free and the process binding it.

/// A loopback port for a process to listen on: free when handed out, never
/// handed out twice by this test process, and outside the kernel's
/// ephemeral range. Every outgoing connection takes its local port from
/// that range, so a port found free there (bound to port 0, then let go)
/// may be a connection's by the time the process binds it: on a busy
/// machine a Frontend failed to start so. Outside it, only another
/// listener could take it, and a restarted process gets its port back.
pub(super) fn port() -> u16 {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU32, Ordering};

    static NEXT: OnceLock<AtomicU32> = OnceLock::new();
    let (low, high) = listening_ports();
    let span = u32::from(high - low);
    // From a random start, so that test processes running at once seldom
    // try the same ports.
    let next = NEXT.get_or_init(|| AtomicU32::new(fastrand::u32(..span)));
    for _ in 0..span {
        let candidate = low + (next.fetch_add(1, Ordering::Relaxed) % span) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", candidate)).is_ok() {
            return candidate;
        }
    }
    panic!("no free loopback port in {low}..{high}");
}

/// Ports below the kernel's ephemeral range (Linux's default is
/// 32768–60999), or above it when that leaves more room.
fn listening_ports() -> (u16, u16) {
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| {
            let mut ends = range.split_whitespace().map(|end| end.parse::<u16>().ok());
            Some((ends.next()??, ends.next()??))
        })
        .unwrap_or((32768, 60999));
    let below = (10_000, ephemeral.0.max(10_000));
    let above = (ephemeral.1.saturating_add(1).max(10_000), u16::MAX);
    let room = |(low, high): (u16, u16)| high.saturating_sub(low);
    let ports = if room(below) >= room(above) {
        below
    } else {
        above
    };
    assert!(
        room(ports) >= 1000,
        "the ephemeral port range {ephemeral:?} leaves no room for listening ports"
    );
    ports
}
