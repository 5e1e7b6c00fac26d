//! A service as wiring: its HTTP routes, consumers, schedules and outbox relay are declared on a
//! [`Service`], which adds the health routes, binds the listener and runs every task under one
//! [`Supervisor`]: a task ending fails readiness and the service (so the process exits non-zero),
//! and a shutdown is bounded by `FORGESYNC_SHUTDOWN_GRACE`.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use axum::Router;
use bus::Bus;
use bus::consumer::{ConsumerSpec, Handler};
use bus::permissions::Identity;
use bus::relay::{Relay, RelayConfig};
use sea_orm::DatabaseConnection;
use tokio_util::sync::CancellationToken;

use crate::{CommonArgs, HealthState, Readiness, ScheduleRunner, Supervisor};

/// A service's entry point, implemented by its config: one way for a binary, the local stack and
/// tests to start any service.
pub trait Launch: Send + Sized + 'static {
    /// The service's name, as in logs and its binary.
    const NAME: &'static str;

    /// The flags every service shares.
    fn common_mut(&mut self) -> &mut CommonArgs;

    /// Runs the service until `shutdown`; `on_listen` learns the bound address.
    fn launch(
        self,
        shutdown: CancellationToken,
        on_listen: Box<dyn FnOnce(SocketAddr) + Send>,
    ) -> impl Future<Output = anyhow::Result<()>> + Send;
}

/// The tasks and routes of one service; see the module docs.
pub struct Service {
    name: &'static str,
    common: CommonArgs,
    tasks: Supervisor,
    routes: Router,
}

impl Service {
    /// A service named `name` configured by `common`, stopping when `shutdown` is cancelled.
    pub fn new(name: &'static str, common: &CommonArgs, shutdown: &CancellationToken) -> Self {
        Service {
            name,
            common: common.clone(),
            tasks: Supervisor::new(shutdown),
            routes: Router::new(),
        }
    }

    /// Whether every task still runs (the health routes report it).
    pub fn readiness(&self) -> Readiness {
        self.tasks.readiness()
    }

    /// Adds HTTP routes beside the health routes.
    pub fn routes(&mut self, routes: Router) -> &mut Self {
        self.routes = std::mem::take(&mut self.routes).merge(routes);
        self
    }

    /// Runs `task(stop)` under supervision; see [`Supervisor::spawn`].
    pub fn task<F, Fut>(&mut self, name: impl Into<String>, task: F) -> &mut Self
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        self.tasks.spawn(name, task);
        self
    }

    /// Runs `task(stop)` until every other task has ended; see [`Supervisor::spawn_draining`].
    pub fn draining_task<F, Fut>(&mut self, name: impl Into<String>, task: F) -> &mut Self
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        self.tasks.spawn_draining(name, task);
        self
    }

    /// Runs a durable consumer, named after its durable name.
    pub fn consumer<H: Handler>(
        &mut self,
        bus: &Bus,
        db: &DatabaseConnection,
        spec: ConsumerSpec,
        handler: Arc<H>,
    ) -> &mut Self {
        let (bus, db) = (bus.clone(), db.clone());
        self.task(
            format!("consumer {}", spec.durable),
            move |stop| async move {
                bus::consumer::run(&bus, db, spec, handler, stop)
                    .await
                    .map_err(anyhow::Error::from)
            },
        )
    }

    /// Runs the schedules, if there are any (a runner without schedules would end at once).
    pub fn schedules(&mut self, schedules: ScheduleRunner) -> &mut Self {
        if schedules.is_empty() {
            return self;
        }
        self.task("schedules", |stop| schedules.run(stop))
    }

    /// Relays the outbox rows this service's NATS identity may publish (every row for a service
    /// without one); any number of relays is safe.
    pub fn relay(&mut self, db: &DatabaseConnection, bus: &Bus) -> &mut Self {
        let config = RelayConfig {
            subjects: Identity::for_service(self.name)
                .map(Identity::publishes)
                .unwrap_or_default(),
            ..RelayConfig::default()
        };
        let relay = Relay::new(db.clone(), bus.clone(), config);
        self.task("outbox relay", |stop| async move {
            relay.run(stop).await;
            Ok(())
        })
    }

    /// Binds `FORGESYNC_LISTEN`, serves the routes with `/healthz`, `/readyz` and `/metrics`
    /// (readiness checks `db`, `nats` when given, and the tasks) or, with
    /// `FORGESYNC_HEALTH_LISTEN`, serves those three on that second listener instead; tells
    /// `on_listen` the API's address, then supervises every task until shutdown or the first to
    /// end.
    pub async fn serve(
        self,
        db: &DatabaseConnection,
        nats: Option<async_nats::Client>,
        on_listen: impl FnOnce(SocketAddr) + Send,
    ) -> anyhow::Result<()> {
        let Service {
            name,
            common,
            mut tasks,
            routes,
        } = self;
        let routes = crate::http_metrics::layer(routes, name);
        // Every API request is a server span continuing the caller's trace (health is not).
        let routes = routes.layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                crate::telemetry::trace_request(name, request, next)
            },
        ));
        let health = crate::health::router(HealthState {
            db: db.clone(),
            nats,
            tasks: tasks.readiness(),
        });
        let app = match common.health_listen {
            None => routes.merge(health),
            Some(health_addr) => {
                let listener = bind("FORGESYNC_HEALTH_LISTEN", health_addr).await?;
                tracing::info!(addr = %listener.local_addr()?, service = name, "health listening");
                tasks.spawn("health server", move |stop| {
                    serve_until(listener, health, stop, name)
                });
                routes
            }
        };
        let listener = bind("FORGESYNC_LISTEN", common.listen).await?;
        let addr = listener.local_addr()?;
        tracing::info!(%addr, service = name, "listening");
        on_listen(addr);
        tasks.spawn("http server", move |stop| {
            serve_until(listener, app, stop, name)
        });
        // FORGESYNC_SHUTDOWN_GRACE bounds the stop.
        tasks.run(common.shutdown_grace()).await
    }
}

async fn bind(setting: &str, addr: SocketAddr) -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("{setting}: cannot bind {addr}"))
}

async fn serve_until(
    listener: tokio::net::TcpListener,
    app: Router,
    stop: CancellationToken,
    name: &'static str,
) -> anyhow::Result<()> {
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { stop.cancelled().await })
        .await
        .with_context(|| format!("{name} server"))
}

/// Implements [`Launch`] for a service's `Config` (with a `common` field) over its
/// `run(config, shutdown, on_listen)`: `runtime::launch!(Config, "ingress", run);`.
#[macro_export]
macro_rules! launch {
    ($config:ty, $name:literal, $run:path) => {
        impl $crate::Launch for $config {
            const NAME: &'static str = $name;

            fn common_mut(&mut self) -> &mut $crate::CommonArgs {
                &mut self.common
            }

            fn launch(
                self,
                shutdown: ::tokio_util::sync::CancellationToken,
                on_listen: Box<dyn FnOnce(::std::net::SocketAddr) + Send>,
            ) -> impl ::std::future::Future<Output = ::anyhow::Result<()>> + Send {
                $run(self, shutdown, on_listen)
            }
        }
    };
}
