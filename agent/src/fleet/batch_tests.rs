use super::*;
use socket2::{Domain, Protocol, Type};
use std::mem::MaybeUninit;
use std::time::Duration;

fn udp(at: &str) -> Socket {
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
    s.bind(&SockAddr::from(at.parse::<SocketAddr>().unwrap())).unwrap();
    s
}

fn recv(s: &Socket) -> Option<(Vec<u8>, SocketAddr)> {
    let mut buf = [MaybeUninit::<u8>::uninit(); 1024];
    let (n, from) = s.recv_from(&mut buf).ok()?;
    // SAFETY: recv_from initialised the first n bytes.
    let d = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), n) };
    Some((d.to_vec(), from.as_socket().unwrap()))
}

/// Each datagram reaches its own receiver, whole, from the sending
/// socket; one the kernel refuses (an IPv6 address from an IPv4 socket)
/// is dropped and those after it still go; the buffers are used again.
#[test]
fn each_datagram_goes_to_its_receiver_and_a_refused_one_alone_is_dropped() {
    let sender = udp("127.0.0.1:0");
    let from = sender.local_addr().unwrap().as_socket().unwrap();
    let receivers: Vec<Socket> = (0..3).map(|_| udp("127.0.0.1:0")).collect();
    for r in &receivers {
        r.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    }
    let addr = |r: &Socket| r.local_addr().unwrap().as_socket().unwrap();
    for round in 0..3 {
        let sent = Batch::with(|b| {
            for (i, r) in receivers.iter().enumerate() {
                if i == 1 {
                    b.push("[::1]:9".parse().unwrap()).extend_from_slice(b"refused");
                }
                b.push(addr(r)).extend_from_slice(format!("round {round} to {i} {}", "x".repeat(i * 100)).as_bytes());
            }
            assert_eq!(b.len(), 4);
            b.send(&sender)
        });
        assert_eq!(sent, 3, "round {round}: the three IPv4 datagrams go, the IPv6 one alone is refused");
        for (i, r) in receivers.iter().enumerate() {
            let (d, src) = recv(r).expect("delivered");
            assert_eq!(String::from_utf8(d).unwrap(), format!("round {round} to {i} {}", "x".repeat(i * 100)));
            assert_eq!(src, from);
        }
    }
    // More than the kernel takes in one call: every one still goes.
    let many = udp("127.0.0.1:0");
    many.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let total = 1500;
    let sent = Batch::with(|b| {
        for i in 0..total {
            b.push(addr(&many)).extend_from_slice(i.to_string().as_bytes());
        }
        b.send(&sender)
    });
    let got: Vec<usize> = std::iter::from_fn(|| {
        many.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        recv(&many).map(|(d, _)| String::from_utf8(d).unwrap().parse().unwrap())
    })
    .collect();
    // The receive buffer may drop some; what arrives is in order and all
    // were handed over.
    assert_eq!(sent, total);
    assert!(got.len() >= 100 && got.windows(2).all(|w| w[0] < w[1]), "{} arrived", got.len());
}

/// The reader's side: what is queued comes in calls of at most `most`
/// (and `INBOX`), each datagram whole with its source, one longer than a
/// report cut at one byte over (so it reads as too long), and an empty
/// socket says WouldBlock.
#[test]
fn the_inbox_takes_what_is_queued_with_each_source() {
    let rx = udp("127.0.0.1:0");
    let at = SockAddr::from(rx.local_addr().unwrap().as_socket().unwrap());
    let senders: Vec<Socket> = (0..2).map(|_| udp("127.0.0.1:0")).collect();
    let total = INBOX + 10;
    let mut want = Vec::new();
    for i in 0..total {
        let s = &senders[i % 2];
        let d = if i == 3 { vec![b'x'; 300] } else { format!("datagram {i}").into_bytes() };
        s.send_to(&d, &at).unwrap();
        want.push((d[..d.len().min(RECV_ROOM)].to_vec(), s.local_addr().unwrap().as_socket()));
    }
    let mut inbox = Inbox::default();
    let mut got = Vec::new();
    let (n, all) = inbox.recv(&rx, 5).unwrap();
    assert_eq!((n, all), (5, false), "at most `most`");
    got.extend((0..n).map(|i| (inbox.get(i).0.to_vec(), inbox.get(i).1)));
    loop {
        match inbox.recv(&rx, usize::MAX) {
            Ok((n, all)) => {
                assert!(n <= INBOX);
                got.extend((0..n).map(|i| (inbox.get(i).0.to_vec(), inbox.get(i).1)));
                if all {
                    break;
                }
            }
            Err(e) => {
                assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
                break;
            }
        }
    }
    assert_eq!(got, want);
    assert_eq!(got[3].0.len(), huntlb_policy::forward::MAX_REPORT_LEN + 1, "a long datagram reads as too long");
    assert_eq!(inbox.recv(&rx, INBOX).unwrap_err().kind(), std::io::ErrorKind::WouldBlock);
}

/// A send from inside a send (nothing does so today) gets a batch of its own.
#[test]
fn a_nested_send_gets_its_own_batch() {
    Batch::with(|outer| {
        outer.push("127.0.0.1:9".parse().unwrap()).push(b'a');
        Batch::with(|inner| assert_eq!(inner.len(), 0));
        assert_eq!(outer.len(), 1);
    });
}
