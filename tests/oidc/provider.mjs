// A real OpenID provider for the sign-in tests: the npm package oidc-provider (v9), installed
// under var/oidc-provider by scripts/ensure-oidc-provider.sh.
//
// Environment: OIDC_PORT, OIDC_ISSUER, OIDC_REDIRECT_URI, OIDC_CLIENT_ID, OIDC_CLIENT_SECRET and
// OIDC_STATE_FILE, a JSON file the tests rewrite between steps and this process reads at every
// request: {"accounts": {"alice": {"email": ..., "groups": [...]}}, "clock_offset_seconds": 0}.
// An account's login is its subject (`sub`); its preferred_username is the login too, unless the
// account has a "username" of its own (a renamed person, or a name made to attack the portal).
// A clock offset makes the provider's clock run behind, so the ID tokens it issues have already
// expired by the portal's clock: a real expired token, signed with the real key.
//
// Sign-in uses the package's development interactions: a form where any listed login (with any
// password) signs in; consent is skipped for our one client.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { default: Provider } = await import(
  require.resolve('oidc-provider', { paths: [process.env.OIDC_PROVIDER_MODULES] })
);

const {
  OIDC_PORT, OIDC_ISSUER, OIDC_REDIRECT_URI, OIDC_CLIENT_ID, OIDC_CLIENT_SECRET, OIDC_STATE_FILE,
} = process.env;

function state() {
  return JSON.parse(readFileSync(OIDC_STATE_FILE, 'utf8'));
}

const realNow = Date.now.bind(Date);
Date.now = () => realNow() + 1000 * (state().clock_offset_seconds || 0);

const provider = new Provider(OIDC_ISSUER, {
  clients: [{
    client_id: OIDC_CLIENT_ID,
    client_secret: OIDC_CLIENT_SECRET,
    redirect_uris: [OIDC_REDIRECT_URI],
    grant_types: ['authorization_code'],
    response_types: ['code'],
    token_endpoint_auth_method: 'client_secret_post',
  }],
  pkce: { required: () => true },
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['preferred_username', 'name', 'groups'],
  },
  ttl: { IdToken: 60, AccessToken: 60, AuthorizationCode: 60, Interaction: 3600, Session: 3600, Grant: 3600 },
  features: { devInteractions: { enabled: true } },
  async findAccount(ctx, id) {
    const account = state().accounts[id];
    if (!account) return undefined;
    return {
      accountId: id,
      async claims() {
        const now = state().accounts[id] || account; // groups as they are now, not at sign-in
        return { sub: id, preferred_username: now.username || id, email: now.email, email_verified: true, name: id, groups: now.groups };
      },
    };
  },
  async loadExistingGrant(ctx) {
    const grantId = ctx.oidc.result?.consent?.grantId || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
    if (grantId) return ctx.oidc.provider.Grant.find(grantId);
    const grant = new ctx.oidc.provider.Grant({ clientId: ctx.oidc.client.clientId, accountId: ctx.oidc.session.accountId });
    grant.addOIDCScope('openid email profile');
    await grant.save();
    return grant;
  },
});
provider.on('server_error', (ctx, error) => console.error('server_error', error));

provider.listen(Number(OIDC_PORT), '127.0.0.1', () => console.log(`oidc-provider listening on ${OIDC_ISSUER}`));
