// A real OpenID provider for the plane's IdP tests: panva's certified `oidc-provider` (npm,
// pinned and installed into .tools/oidc by scripts/oidc-provider.sh), signing EdDSA (Ed25519)
// ID tokens. The token and the JWKS it is checked against come from oidc-provider's own code;
// this file only configures it and plays the browser.
//
//   node tests/oidc/provider.mjs <port>
//
// listens on 127.0.0.1:<port> and prints one line `ready` on stdout once it does (everything
// else it says goes to stderr). It runs until killed.
//
// What it serves:
//   - the provider itself, issuer `http://127.0.0.1:<port>` (an origin, no trailing slash: what
//     the space pins with IdpPin::from_url, which also pins issuer = audience = that origin);
//   - its JWKS at `/jwks` (routes.jwks), the pin's `jwksUri`: one Ed25519 key, generated fresh
//     at every start, alg `EdDSA`, kid its RFC 7638 thumbprint;
//   - `GET /test/id-token?sub=<subject>[&client=other]`: the one helper route, not
//     oidc-provider's. It drives the real authorization-code flow against the provider over
//     HTTP, as a browser and a relying party would: the authorization request (PKCE S256,
//     state, nonce), the development login page (devInteractions) submitted as <subject>, the
//     consent page submitted, the redirect back carrying `code`, then `POST /token` with the
//     client's secret (client_secret_basic). It answers 200 with the bare `id_token` as
//     text/plain, or 500 with what went wrong.
//
// Clients (an OIDC ID token's `aud` is the client_id):
//   - `http://127.0.0.1:<port>`: client_id = the issuer origin, so its ID tokens carry the
//     audience the pin expects (the default for /test/id-token);
//   - `other-client` (`&client=other`): a second relying party, whose ID tokens the plane
//     must refuse.
// Both are confidential web clients with `id_token_signed_response_alg: "EdDSA"`, redirecting
// to `http://127.0.0.1:<port>/test/callback` (never followed: the code is read off the
// redirect). enabledJWA allows EdDSA only for ID tokens, so nothing else can be negotiated.
//
// Not real, on purpose: accounts (devInteractions' default findAccount: any login is an
// account whose only claim is `sub`), the in-memory adapter, and the fixed client secrets and
// cookie keys. None of them takes part in signing or verifying.

import { generateKeyPairSync, createHash, randomBytes } from 'node:crypto';

const here = new URL('.', import.meta.url);
const { default: Provider } = await import(
  new URL('../../.tools/oidc/node_modules/oidc-provider/lib/index.js', here).href
).catch((e) => {
  console.error(`oidc-provider is not installed (run scripts/oidc-provider.sh): ${e.message}`);
  process.exit(1);
});

const port = Number(process.argv[2]);
if (!Number.isInteger(port) || port < 1 || port > 65535) {
  console.error('usage: node tests/oidc/provider.mjs <port>');
  process.exit(2);
}
const issuer = `http://127.0.0.1:${port}`;
const redirectUri = `${issuer}/test/callback`;
const clients = {
  default: { client_id: issuer, client_secret: 'secret-of-the-plane-client' },
  other: { client_id: 'other-client', client_secret: 'secret-of-the-other-client' },
};

// The signing key: Ed25519, private JWK as oidc-provider wants it. `alg` pins the key to the
// one JWS algorithm the plane accepts for it (EdDSA, RFC 8037), rather than leaving the
// provider free to also use it as the fully-specified `Ed25519`.
const { privateKey } = generateKeyPairSync('ed25519');
const jwk = privateKey.export({ format: 'jwk' });
const kid = createHash('sha256')
  .update(JSON.stringify({ crv: jwk.crv, kty: jwk.kty, x: jwk.x }))
  .digest('base64url');

const provider = new Provider(issuer, {
  clients: Object.values(clients).map((c) => ({
    ...c,
    redirect_uris: [redirectUri],
    response_types: ['code'],
    grant_types: ['authorization_code'],
    token_endpoint_auth_method: 'client_secret_basic',
    id_token_signed_response_alg: 'EdDSA',
  })),
  jwks: { keys: [{ ...jwk, kid, alg: 'EdDSA', use: 'sig' }] },
  enabledJWA: { idTokenSigningAlgValues: ['EdDSA'] },
  features: { devInteractions: { enabled: true } },
  routes: { jwks: '/jwks' },
  cookies: { keys: ['cookie-key-for-the-test-provider'] },
  pkce: { required: () => true },
});

// A cookie jar, path-blind: the flow talks to one origin, and oidc-provider's cookies are
// scoped by unique per-interaction paths, so sending all of them is harmless.
function jar() {
  const cookies = new Map();
  return {
    header: () => [...cookies].map(([k, v]) => `${k}=${v}`).join('; '),
    take(res) {
      for (const line of res.headers.getSetCookie()) {
        const [pair, ...attrs] = line.split(';');
        const eq = pair.indexOf('=');
        const [name, value] = [pair.slice(0, eq).trim(), pair.slice(eq + 1).trim()];
        const expired = attrs.some((a) => /^\s*expires=/i.test(a)
          && Date.parse(a.split('=')[1]) <= Date.now());
        if (expired || value === '') cookies.delete(name);
        else cookies.set(name, value);
      }
    },
  };
}

// The whole code flow for `sub` at `client`, over HTTP to this very provider.
async function idToken(sub, client) {
  const cookies = jar();
  const request = async (url, init = {}) => {
    const res = await fetch(new URL(url, issuer), {
      ...init,
      redirect: 'manual',
      headers: { ...init.headers, cookie: cookies.header() },
    });
    cookies.take(res);
    return res;
  };
  const verifier = randomBytes(32).toString('base64url');
  const state = randomBytes(16).toString('base64url');
  const auth = new URL('/auth', issuer);
  auth.search = new URLSearchParams({
    client_id: client.client_id,
    response_type: 'code',
    scope: 'openid',
    redirect_uri: redirectUri,
    state,
    nonce: randomBytes(16).toString('base64url'),
    code_challenge: createHash('sha256').update(verifier).digest('base64url'),
    code_challenge_method: 'S256',
  }).toString();

  // Follow redirects as a browser would; on each interaction page, submit its form the way a
  // person would (the login as `sub`, then the consent), until the redirect to the client.
  let res = await request(auth);
  let code;
  for (let hop = 0; hop < 12 && !code; hop += 1) {
    if (res.status !== 302 && res.status !== 303) {
      throw new Error(`expected a redirect, got ${res.status}: ${await res.text()}`);
    }
    const next = new URL(res.headers.get('location'), issuer);
    if (next.href.startsWith(redirectUri)) {
      if (next.searchParams.get('error')) throw new Error(`authorization refused: ${next.search}`);
      if (next.searchParams.get('state') !== state) throw new Error('state mismatch');
      code = next.searchParams.get('code');
    } else if (next.pathname.startsWith('/interaction/')) {
      const page = await (await request(next)).text();
      const prompt = /name="prompt" value="(\w+)"/.exec(page)?.[1];
      const form = prompt === 'login'
        ? { prompt, login: sub, password: 'any' }
        : { prompt };
      res = await request(next, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams(form).toString(),
      });
    } else {
      res = await request(next);
    }
  }
  if (!code) throw new Error('the flow did not reach the client redirect with a code');

  const basic = Buffer.from(
    `${encodeURIComponent(client.client_id)}:${encodeURIComponent(client.client_secret)}`,
  ).toString('base64');
  const token = await fetch(new URL('/token', issuer), {
    method: 'POST',
    headers: {
      authorization: `Basic ${basic}`,
      'content-type': 'application/x-www-form-urlencoded',
    },
    body: new URLSearchParams({
      grant_type: 'authorization_code',
      code,
      redirect_uri: redirectUri,
      code_verifier: verifier,
    }).toString(),
  });
  const body = await token.json();
  if (!token.ok || typeof body.id_token !== 'string') {
    throw new Error(`token endpoint answered ${token.status}: ${JSON.stringify(body)}`);
  }
  return body.id_token;
}

// The helper route, in front of oidc-provider's own routes.
provider.use(async (ctx, next) => {
  if (ctx.path !== '/test/id-token') return next();
  const sub = ctx.query.sub;
  const client = clients[ctx.query.client ?? 'default'];
  if (typeof sub !== 'string' || !sub || !client) {
    ctx.status = 400;
    ctx.body = 'usage: /test/id-token?sub=<subject>[&client=other]';
    return undefined;
  }
  try {
    ctx.type = 'text/plain';
    ctx.body = await idToken(sub, client);
  } catch (e) {
    ctx.status = 500;
    ctx.body = `the code flow failed: ${e.message}`;
  }
  return undefined;
});

const server = provider.listen(port, '127.0.0.1', () => {
  process.stdout.write('ready\n');
});
server.on('error', (e) => {
  console.error(`cannot listen on 127.0.0.1:${port}: ${e.message}`);
  process.exit(1);
});
