"""ember_common: the kit every Ember process shares — generated gRPC stubs (`proto`), the error
table and server builder (`rpc`), service start-up (`service`), tracing, metrics, shared tunables
(`config`) and ids. It imports neither `ember` (the client) nor any service."""
