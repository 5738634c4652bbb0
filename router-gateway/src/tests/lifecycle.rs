//! What is in flight when the gateway stops or a client goes: requests and streams finish within
//! the grace period, a cut ends them, and every reservation is settled.

use super::*;

#[tokio::test]
async fn shutdown_lets_the_server_end() {
    let mut r = start("", "").await;
    let health = r
        .http
        .get(format!("{}/healthz", r.base))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    let ready = r
        .http
        .get(format!("{}/readyz", r.base))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);
    r.stop.take().unwrap().send(()).unwrap();
    r.done.await.unwrap().unwrap();
}

#[tokio::test]
async fn shutdown_lets_a_stream_in_flight_finish() {
    let mut held = held_upstream().await;
    let mut r = start_over(MockServer::start().await, &held.base, "", "").await;
    let url = format!("{}/v1/chat/completions", r.base);
    let request = r
        .http
        .post(url)
        .bearer_auth(ACME)
        .json(&streamed_hello())
        .send();
    let client = tokio::spawn(async move { request.await.unwrap().text().await.unwrap() });
    held.arrived.recv().await.unwrap();
    assert_eq!(in_flight(&r.router).await, 1);
    // Stop accepting while the stream is open; it still completes.
    r.stop.take().unwrap().send(()).unwrap();
    held.go.take().unwrap().send(()).unwrap();
    let text = client.await.unwrap();
    assert!(
        text.contains("lo!") && text.trim_end().ends_with("data: [DONE]"),
        "{text}"
    );
    r.done.await.unwrap().unwrap();
    assert_eq!(in_flight(&r.router).await, 0);
}

#[tokio::test]
async fn a_cut_ends_the_streams_and_answers_in_flight_and_settles_them() {
    // A stream in flight: its first chunk is out, the rest held upstream.
    let mut held = held_upstream().await;
    let r = start_over(MockServer::start().await, &held.base, "", "").await;
    let url = format!("{}/v1/chat/completions", r.base);
    let mut streaming = r
        .http
        .post(&url)
        .bearer_auth(ACME)
        .json(&streamed_hello())
        .send()
        .await
        .unwrap();
    let first = streaming.chunk().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("Hel"));
    assert_eq!(in_flight(&r.router).await, 1);
    r.cut.now();
    // The stream ends with the error and no `[DONE]`; the upstream call is dropped.
    let mut rest = String::new();
    while let Some(chunk) = streaming.chunk().await.unwrap() {
        rest.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(rest.contains("\"gateway_stopping\""), "{rest}");
    assert!(!rest.contains("[DONE]"), "{rest}");
    held.hung_up.recv().await.unwrap();
    assert_eq!(in_flight(&r.router).await, 0);
    assert_stream_ended(&r, "shutdown").await;
    // A request after the cut is refused before it reserves anything.
    let refused = r.post(Some(ACME), &hello()).await;
    assert_eq!(refused.status(), 503);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "gateway_stopping");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("gateway.grace_secs")
    );
    assert_eq!(in_flight(&r.router).await, 0);
}

#[tokio::test]
async fn a_cut_drops_a_stream_no_one_polls_and_settles_it() {
    // A relay whose client stopped reading is not polled once the buffers are full: the cut
    // must end its stream all the same. Here no one polls it at all.
    let mut held = held_upstream().await;
    let r = start_over(MockServer::start().await, &held.base, "", "").await;
    let mut req = router_sdk::ChatRequest::new("Hi");
    req.model = Some("chat".into());
    // A tenant's request: counted in flight (the model has no limit of its own).
    req.tenant = Some("acme".into());
    let stream = r.router.chat_stream(req).await.unwrap();
    held.arrived.recv().await.unwrap();
    let slot = r.cut.streams.hold(stream);
    assert_eq!(in_flight(&r.router).await, 1);
    r.cut.now();
    assert!(slot.lock().unwrap().is_none());
    held.hung_up.recv().await.unwrap();
    assert_eq!(in_flight(&r.router).await, 0);
}

#[tokio::test]
async fn a_client_gone_before_its_answer_is_counted_and_settled() {
    let mut held = held_upstream().await;
    let r = start_over(MockServer::start().await, &held.base, "", "").await;
    let url = format!("{}/v1/chat/completions", r.base);
    let request = r.http.post(url).bearer_auth(ACME).json(&hello()).send();
    let client = tokio::spawn(request);
    held.arrived.recv().await.unwrap();
    assert_eq!(in_flight(&r.router).await, 1);
    client.abort();
    // The handler is dropped with the connection, and the provider call with it.
    held.hung_up.recv().await.unwrap();
    assert_eq!(in_flight(&r.router).await, 0);
    let metrics = r
        .http
        .get(format!("{}/metrics", r.base))
        .send()
        .await
        .unwrap();
    let text = metrics.text().await.unwrap();
    assert!(
        text.contains("outcome=\"client_closed\"") && text.contains("tenant=\"acme\""),
        "{text}"
    );
}

#[tokio::test]
async fn a_stream_no_one_reads_is_dropped_past_its_deadline_and_settled() {
    // A client that stopped reading leaves its relay unpolled: past the request's deadline the
    // stream is dropped all the same, which hangs up on the provider and settles it.
    let mut held = held_upstream().await;
    let r = start_over(MockServer::start().await, &held.base, "", "").await;
    let mut req = router_sdk::ChatRequest::new("Hi");
    req.model = Some("chat".into());
    req.tenant = Some("acme".into());
    req.deadline = Some(std::time::Duration::from_secs(1));
    let stream = r.router.chat_stream(req).await.unwrap();
    held.arrived.recv().await.unwrap();
    let slot = r.cut.streams.hold(stream);
    let _expiry = Streams::expire_unread(&slot);
    assert_eq!(in_flight(&r.router).await, 1);
    held.hung_up.recv().await.unwrap();
    assert!(slot.lock().unwrap().is_none());
    assert_eq!(in_flight(&r.router).await, 0);
}

#[tokio::test]
async fn a_cut_refuses_a_whole_answer_in_flight_and_settles_it() {
    let r = start("", "").await;
    // The upstream answers after a minute: the request is in flight when the cut comes.
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_raw(fixture("openai/ok.json"), "application/json")
                .set_delay(std::time::Duration::from_secs(60)),
        )
        .mount(&r.upstream)
        .await;
    let url = format!("{}/v1/chat/completions", r.base);
    let request = r.http.post(url).bearer_auth(ACME).json(&hello()).send();
    let client = tokio::spawn(request);
    // Wait until the provider has the request (and the ledger its reservation).
    let arrived = async {
        while r
            .upstream
            .received_requests()
            .await
            .unwrap_or_default()
            .is_empty()
        {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(60), arrived)
        .await
        .expect("the provider never got the request");
    assert_eq!(in_flight(&r.router).await, 1);
    r.cut.now();
    let response = client.await.unwrap().unwrap();
    assert_eq!(response.status(), 503);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "gateway_stopping");
    assert_eq!(in_flight(&r.router).await, 0);
}

#[tokio::test]
async fn a_client_gone_mid_stream_cancels_the_upstream_call_and_settles() {
    let mut held = held_upstream().await;
    let r = start_over(MockServer::start().await, &held.base, "", "").await;
    let url = format!("{}/v1/chat/completions", r.base);
    let mut response = r
        .http
        .post(url)
        .bearer_auth(ACME)
        .json(&streamed_hello())
        .send()
        .await
        .unwrap();
    let first = response.chunk().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("Hel"));
    assert_eq!(in_flight(&r.router).await, 1);
    drop(response);
    // The gateway drops the stream, which closes the upstream call and settles at once.
    held.hung_up.recv().await.unwrap();
    assert_eq!(in_flight(&r.router).await, 0);
    assert_stream_ended(&r, "client_gone").await;
}

/// `/metrics` counts one stream, which ended as `how`.
async fn assert_stream_ended(r: &Running, how: &str) {
    let metrics = r.metrics_text().await;
    let ended = format!("llmroute_streams_total{{ended=\"{how}\"}} 1");
    assert!(metrics.contains(&ended), "{metrics}");
    let streams = metrics
        .lines()
        .filter(|l| l.starts_with("llmroute_streams_total{"));
    assert_eq!(streams.count(), 1, "{metrics}");
}
