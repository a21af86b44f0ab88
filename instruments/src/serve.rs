//! The accept loop the instruments' HTTP servers share (the workload app, the
//! model server, the endpoint picker).

use std::future::Future;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};

/// Accepts connections on `listener` for ever, each served by `conn(stream)`
/// on a task of its own (Nagle off: the answers are small). A failed accept
/// (out of file descriptors under a load test) is logged and tried again after
/// 10 ms rather than ending the server.
pub async fn accept_each<F, Fut>(listener: TcpListener, mut conn: F) -> !
where
    F: FnMut(TcpStream) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("accept: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(conn(stream));
    }
}
