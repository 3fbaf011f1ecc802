"""Single sign-on: OpenID Connect providers, an LDAP/AD directory, and the ordered
mapping rules that turn their groups into platform admin, team roles and billing teams."""
