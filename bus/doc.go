// Package bus owns everything NATS in quarry:
//
//   - StartServer / StartSites: the embedded nats-server that `quarry bus`
//     (and `quarry manager`, `quarry dev`, tests) runs — a single node, a
//     site's cluster joined by routes, sites joined by gateways — and Connect
//     for a connection to it or to an external NATS;
//   - Subjects: the subject scheme of SPEC §6 under a configurable prefix;
//   - Request / Serve / Publish: typed request/reply with deadlines, where
//     ErrNoResponders ("nobody serves this", answered at once) is distinct
//     from ErrTimeout and ErrPermissionDenied, and handler errors come back
//     as *RemoteError; versioned codecs (json/1, bin/1, raw/1);
//   - streams (NewReceiver / NewSender): chunked, checksummed, resumable
//     transfers under credit-based flow control for anything larger than one
//     message;
//   - RolePermissions / AuthorizationConfig: the per-role users of SPEC §11.
//
// bus imports nothing of ours. The messages roles exchange live in api/;
// bus only carries them. DESIGN.md says why it is built this way.
package bus
