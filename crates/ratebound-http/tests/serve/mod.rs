//! An axum app on a free 127.0.0.1 port, with the peer address for the
//! layer (axum's `ConnectInfo`), shared by the HTTP test files.

use std::net::SocketAddr;

use axum::Router;

pub async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    addr
}
