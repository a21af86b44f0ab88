/// `[::]` takes IPv4 too, whatever net.ipv6.bindv6only says.
#[tokio::test]
async fn an_ipv6_any_listener_is_dual_stack() {
    let l = super::bind_tcp("[::]:0".parse().unwrap()).unwrap();
    assert!(!socket2::SockRef::from(&l).only_v6().unwrap());
    let port = l.local_addr().unwrap().port();
    let (v4, _) = tokio::join!(tokio::net::TcpStream::connect(("127.0.0.1", port)), l.accept());
    assert!(v4.is_ok());
}
