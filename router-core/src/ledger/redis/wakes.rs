//! Wake-ups from Redis: the scripts publish a ticket on the namespace's channel when its turn may
//! have come (see `lua/common.lua`'s lines), and one subscription per store hands each to the
//! waiters of this process.
//!
//! The subscription starts with the first waiter and lives as long as the store. On a Redis
//! Cluster it listens on the first node: a PUBLISH reaches every node of a cluster. A lost
//! subscription is made again after [`RESUBSCRIBE`]; meanwhile waiters ask again when their
//! wait ends, as they do with the stores that send no wake-ups. Each time the subscription is
//! made, [`EVERYONE`] is sent: waiters may have missed their turn, and ask again.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use redis::ConnectionInfo;
use tokio::sync::broadcast;

use crate::config::{RedisTarget, parse_redis_url};
use crate::ledger::memory::WAKES_BUFFER;

/// The wake-up that means "every waiter": sent when the subscription is made (again), since
/// what was published before it was missed. Tickets are never 0.
pub const EVERYONE: u64 = 0;

/// How long a lost subscription waits before it is made again.
pub(crate) const RESUBSCRIBE: Duration = Duration::from_secs(1);

/// One store's wake-ups: where to subscribe, and the waiters' channel.
pub(crate) struct Wakes {
    /// The server to subscribe on. Holds the password: never shown.
    target: Option<ConnectionInfo>,
    channel: String,
    sender: broadcast::Sender<u64>,
    /// The subscription's task, once started.
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Wakes {
    /// Wake-ups published on `channel` of the Redis at `url` (a server or a cluster).
    pub(crate) fn new(url: &str, channel: String) -> Self {
        let target = match parse_redis_url(url) {
            Ok(RedisTarget::Single) => redis::IntoConnectionInfo::into_connection_info(url).ok(),
            Ok(RedisTarget::Cluster(nodes)) => nodes.into_iter().next(),
            Err(_) => None,
        };
        Self {
            target,
            channel,
            sender: broadcast::channel(WAKES_BUFFER).0,
            task: Mutex::new(None),
        }
    }

    /// A receiver of wake-ups, the subscription started if it was not (inside a Tokio
    /// runtime; outside one, none are sent and waiters ask again when their wait ends).
    pub(crate) fn subscribe(self: &Arc<Self>) -> broadcast::Receiver<u64> {
        let receiver = self.sender.subscribe();
        let mut task = self.task.lock().unwrap_or_else(|e| e.into_inner());
        if task.is_none()
            && let (Some(target), Ok(runtime)) =
                (self.target.clone(), tokio::runtime::Handle::try_current())
        {
            let (channel, sender) = (self.channel.clone(), self.sender.clone());
            *task = Some(runtime.spawn(listen(target, channel, sender)));
        }
        receiver
    }
}

impl Drop for Wakes {
    fn drop(&mut self) {
        let task = self.task.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(task) = task.take() {
            task.abort();
        }
    }
}

/// Forwards every ticket published on `channel` to `sender`, subscribing again after a loss.
async fn listen(target: ConnectionInfo, channel: String, sender: broadcast::Sender<u64>) {
    loop {
        match subscribed(&target, &channel).await {
            Ok(mut pubsub) => {
                // Wake-ups published before now were missed: every waiter asks again.
                let _ = sender.send(EVERYONE);
                let mut messages = pubsub.on_message();
                while let Some(message) = messages.next().await {
                    let ticket = message.get_payload::<String>().ok();
                    if let Some(t) = ticket.as_deref().and_then(super::lines::member_ticket) {
                        // No receiver: nobody waits at this moment.
                        let _ = sender.send(t);
                    }
                }
                tracing::info!("the wake-up subscription ended; subscribing again");
            }
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    "could not subscribe to wake-ups; waiting requests ask again when their wait ends"
                );
            }
        }
        tokio::time::sleep(RESUBSCRIBE).await;
    }
}

async fn subscribed(
    target: &ConnectionInfo,
    channel: &str,
) -> redis::RedisResult<redis::aio::PubSub> {
    let client = redis::Client::open(target.clone())?;
    let mut pubsub = client.get_async_pubsub().await?;
    pubsub.subscribe(channel).await?;
    Ok(pubsub)
}
