//! Where the spliced relay's chunks end: at a short message, and at the TCP urgent mark.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{Loopback, in_time, loopback};

#[tokio::test]
async fn a_short_message_is_not_followed_by_an_empty_splice() {
    let Loopback {
        mut app,
        mut server,
        relay,
        pipes,
    } = loopback(Vec::new(), Ok(())).await;
    let mut got = [0u8; 5];
    let mut round_trip = async |app: &mut TcpStream, server: &mut TcpStream| {
        app.write_all(b"ping\n").await.unwrap();
        in_time(server.read_exact(&mut got)).await.unwrap();
        assert_eq!(&got, b"ping\n");
        server.write_all(b"pong\n").await.unwrap();
        in_time(app.read_exact(&mut got)).await.unwrap();
        assert_eq!(&got, b"pong\n");
    };
    // The first one carries the opening, which the guard reads: counted from after it.
    round_trip(&mut app, &mut server).await;
    let (empty_before, spliced_before) = (pipes.empty_splices(), pipes.spliced());
    for _ in 0..20 {
        round_trip(&mut app, &mut server).await;
    }
    // Each message was shorter than 4 KiB: the look after it is a read, which finds
    // nothing as a splice would, without the ioctl an empty splice needs after it.
    let empty = pipes.empty_splices() - empty_before;
    assert_eq!(empty, 0, "splices that found nothing");
    assert_eq!(
        pipes.spliced() - spliced_before,
        200,
        "every message was spliced"
    );
    drop((app, server));
    let (moved, _, _) = in_time(relay).await.unwrap();
    assert_eq!(
        (moved.client_to_upstream, moved.upstream_to_client),
        (105, 105)
    );
}

#[tokio::test]
async fn an_urgent_byte_is_spliced_in_line_then_the_rest() {
    let Loopback {
        mut app,
        mut server,
        relay,
        ..
    } = loopback(Vec::new(), Ok(())).await;
    app.write_all(b"before").await.unwrap();
    // Once the opening reached the server, the client's bytes go through splice(2).
    let mut before = [0u8; 6];
    in_time(server.read_exact(&mut before)).await.unwrap();
    assert_eq!(&before, b"before");
    let urgent = socket2::SockRef::from(&app).send_out_of_band(b"!");
    assert_eq!(urgent.unwrap(), 1);
    app.write_all(b"after").await.unwrap();
    app.shutdown().await.unwrap();
    let mut rest = Vec::new();
    in_time(server.read_to_end(&mut rest)).await.unwrap();
    assert_eq!(
        rest, b"!after",
        "the urgent byte in line, in order, then the rest"
    );
    drop(server);
    let (moved, result, _) = in_time(relay).await.unwrap();
    result.unwrap();
    assert_eq!(moved.client_to_upstream, 12);
}

#[tokio::test]
async fn a_direction_at_the_urgent_mark_does_not_stall() {
    let Loopback {
        mut app,
        mut server,
        relay,
        ..
    } = loopback(Vec::new(), Ok(())).await;
    // Not closed after the urgent byte: the direction must move it without an EOF.
    server.write_all(b"before").await.unwrap();
    let urgent = socket2::SockRef::from(&server).send_out_of_band(b"!");
    assert_eq!(urgent.unwrap(), 1);
    let mut got = [0u8; 7];
    in_time(app.read_exact(&mut got)).await.unwrap();
    assert_eq!(&got, b"before!");
    server.write_all(b"after").await.unwrap();
    server.shutdown().await.unwrap();
    let mut rest = Vec::new();
    in_time(app.read_to_end(&mut rest)).await.unwrap();
    assert_eq!(rest, b"after");
    drop(app);
    let (moved, _, _) = in_time(relay).await.unwrap();
    assert_eq!(moved.upstream_to_client, 12);
}
