// Package web is the HTTP plumbing of the daemon's endpoints, apart from
// what they answer: the middleware that decides whether a request reaches
// its handler (the Host check against DNS rebinding, same-origin and
// lifecycle guards, the nosniff header, a route prefix), the admission of
// requests into slots per class, and the connection limit that keeps the
// daemon's own endpoints (/metrics, /-/healthy, /-/ready) reachable
// whatever other clients do. It knows nothing of the daemon; each piece is
// tested on its own with httptest.
package web
