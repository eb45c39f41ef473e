//! Feeds arbitrary bytes to the server's decoders exactly as a connection does: the
//! length-delimited codec (64 KiB max) cuts frames, each frame is decoded as a `Request`
//! (and, for the client's side, as a `Reply`), by postcard and by the hand readers the server
//! and the client use, which must agree. Any panic, overflow or out-of-bounds read is a bug. It depends on the
//! protocol crate alone, so the sanitizer build never compiles RocksDB.
//!
//! Run: `cd fuzz && cargo +nightly fuzz run decode_frames -- -max_total_time=60`
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use mds_proto as protocol;
use tokio_util::codec::Decoder;

fuzz_target!(|data: &[u8]| {
    // The server reads requests by hand where it can (`decode_request`): it must give
    // postcard's result, request or error, for every input.
    let by_postcard = protocol::decode::<protocol::Request>(data).map_err(|e| e.to_string());
    let by_hand = protocol::decode_request(data).map_err(|e| e.to_string());
    assert_eq!(by_hand, by_postcard);
    // And the client reads replies by hand where it can (`decode_reply`).
    let by_postcard = protocol::decode::<protocol::Reply>(data).map_err(|e| e.to_string());
    let by_hand = protocol::decode_reply(data).map_err(|e| e.to_string());
    assert_eq!(by_hand, by_postcard);
    let mut codec = protocol::codec();
    let mut buf = BytesMut::from(data);
    while let Ok(Some(frame)) = codec.decode(&mut buf) {
        if let Ok(request) = protocol::decode::<protocol::Request>(&frame) {
            // Whatever decodes must survive a round trip. (Not byte for byte: postcard accepts
            // over-long varints, which re-encode shorter; that is harmless.)
            let mut again = BytesMut::new();
            protocol::encode_frame(&request, &mut again);
            let back = protocol::decode::<protocol::Request>(&again[4..]).expect("re-decodes");
            assert_eq!(back, request);
        }
    }
});
