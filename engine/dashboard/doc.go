// Package dashboard is acemq-flow's web dashboard: an http.Handler that
// reads the run journal and, given an engine, replays and compensates
// failed runs. It needs no worker in its process: it can run anywhere the
// journal's database and the broker are reachable.
//
//	h, err := dashboard.New(dashboard.Config{Engine: eng, Token: os.Getenv("ACEMQ_DASHBOARD_TOKEN")})
//	err = dashboard.ListenAndServe(ctx, "127.0.0.1:8080", h) // until ctx ends
//
// # Pages
//
//   - / lists runs, newest first, filtered by flow, status, time window and
//     text in the error, a page at a time (older pages by start time).
//   - /runs/{id} is one run: its steps, then its timeline (every attempt
//     with its outcome and error, skips, delays with their due times,
//     compensations and replays; long runs of alike events, such as every
//     item's compensation, shortened unless ?timeline=all), its input, and
//     the buttons to replay it or to compensate it now while it is failed,
//     and, once it has stopped (completed, ended, failed, compensated), a
//     "Replay from" form: a step whose input the journal kept, a reason
//     and a confirmation to tick, for engine.ReplayFrom.
//     The child runs it started are listed with their status and linked
//     from the steps that started them; a child run links its parent.
//     Each fork (a Parallel, a ForEach) shows what it is, how many of its
//     branches were handed out, arrived, failed, stopped or are running,
//     where its join stands, and a page of its branches (Config.PageSize),
//     each with its steps and status: ?fork=<join>&from=<n> pages,
//     &show=failed keeps those given up or stopped, &branch=<i> opens one.
//     The page reads the run's whole timeline and groups it in one pass
//     (package timeline), but renders only a page of branches: a ForEach
//     of 100,000 items is a page of a few dozen kilobytes.
//   - /failed groups failed runs by flow, step and error, with numbers and
//     ids taken out of the error so that "card 4242 declined" and "card 17
//     declined" are one group, as ServicePulse groups failed messages. A
//     group is replayed after a page that shows how many runs it will
//     replay (at most Config.MaxGroupReplay) and which.
//   - /failed/replay/{id} is a group replay. Once confirmed, it runs in
//     the background, owned by the Dashboard (Close stops it between two
//     messages), as one engine.ReplayBulk: one pass over the group's
//     dead-letter queue however many runs (a thousand take seconds, where
//     replaying them one by one read the queue once per run). Its page
//     shows the progress, coming again every second, then what became of
//     each run; reloading it replays nothing again. One group replay runs
//     at a time (two passes over one queue would hand each other's
//     messages back); asking for another while one runs leads to it. The
//     last few stay to be looked at until the dashboard restarts.
//   - /charts draws runs started, finished and failed per minute and the
//     p50 and p99 of each step's time over the last hour, from the journal,
//     as SVG rendered on the server.
//   - /fleet is the fleet (package engine/fleet): the workers that report
//     themselves to the journal, each up, draining or lost, ready or not
//     and why, with its version, its flows' versions, what its handlers
//     hold and when it last reported; per step the messages in its queue,
//     in flight, in its dead-letter and parked queues, and its consumers;
//     and the scheduler ladder's backlog per rung and its lateness. The
//     depths are asked of the broker of the dashboard's engine (none
//     without one). It reloads itself every five seconds.
//
// The pages are html/template with a little JavaScript (local times,
// refreshing a run that is still moving) and no build step; their assets
// are embedded.
//
// # Security
//
//   - Every page is escaped by html/template: an error or a payload holding
//     HTML or a script shows as text. The Content-Security-Policy allows
//     only the dashboard's own script and style files.
//   - Replay, replay from a step and compensate are POST forms with a CSRF token: a random
//     nonce in an HttpOnly cookie and, in the form, its HMAC under a key
//     made when New ran (signed double submit; a restarted dashboard asks
//     the form to be sent again). A request from another site
//     (Sec-Fetch-Site: cross-site) is refused whatever it carries.
//   - With a Token, every page but the login form needs it: as
//     "Authorization: Bearer <token>" (scripts; such requests need no CSRF
//     token, since a browser never adds that header on its own), or the
//     session cookie a browser gets from the login form or from opening
//     any page with ?token=<token> (the address is then reloaded without
//     it). The cookie holds a random session id, when it signed in and
//     when it was last seen, signed with a key made from the token (never
//     the token), and is HttpOnly and SameSite=Lax. A session ends
//     SessionMaxAge after its sign-in however busy, SessionIdle after the
//     last page asked for (the cookie's Max-Age and Expires say the
//     nearer), at Log out (the session is refused from then on, even
//     with its cookie kept), and when the token changes. Anything else
//     is 401 with the login form; "Log out" shows only to a browser
//     signed in.
//   - Wrong tokens (the login form, ?token=, a bearer header) are
//     throttled: after 5 from one client address within a minute the
//     address gets 429 with Retry-After for a second, doubled at each
//     further wrong token up to 15 minutes; after 50 overall within a
//     minute every address does, up to a minute. A refused request's
//     token is not compared, so the right one waits too. The address is
//     the peer's: clients behind one proxy share it.
//   - Payload fields a flow marks secret (dsl.Secret, `acemq:"secret"`:
//     engine.Secrets) are masked wherever a payload is shown
//     (engine.Redact): by the engine's flows' secrets, or Config.Secrets
//     for flows the dashboard has no engine for; a flow known to neither
//     is shown as it is.
//   - Without a Token, requests must name a host that is an IP address,
//     localhost or one of Config.Hosts: a page of another site that
//     resolves its own name to 127.0.0.1 (DNS rebinding) gets 403.
//
// # The JSON API
//
// Under /api the dashboard answers JSON, with the pages' functions (the
// runs list's search, failedGroups, redact) and the same token: GET
// /api/runs (flow, status, window, q or search, limit up to MaxAPILimit,
// cursor: APIRuns), /api/runs/{id} (a journal.Run), /api/runs/{id}/timeline
// (APITimeline), /api/failed (flow, window: APIFailed), /api/fleet (the
// fleet.View /fleet shows), and POST
// /api/runs/{id}/replay, /compensate, /cancel, /signal and
// /api/flows/{flow}/start, each with an APIActionRequest body, answering an
// APIAction (start: 201). A failure is an APIError with its status: 400,
// 401, 403 (read-only, another site, or a cookie-signed POST without the
// page's CSRF token in X-CSRF-Token; a bearer client needs none), 404,
// 409, 429, 502.
//
// # Actions with a record
//
// Replay, compensate, cancel, signal (the run page) and start (a flow's
// page, /flows/{flow}, prefilled with its example payload) ask for a
// ticked confirmation, and record in the run's timeline who asked
// (Config.TokenName, or DefaultActor) and the reason typed in
// (engine.Action): "replayed by ada: the bank is back".
//
// Long-lived settings are a Config struct; its zero values are defaults.
package dashboard
