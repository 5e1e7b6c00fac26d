//! GitLab webhook deliveries applied to the mirror (`WebhookApply`) and route admission of projects not yet discovered.
