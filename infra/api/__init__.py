"""What every app's JSON API shares, whatever its nouns: session authentication,
the throttle, the bounded JSON parser, the renderer, the error shape, pages and
redaction, and the schema's refusals. The bearer token lives with its model
(``runs.api.auth``); the settings' ``REST_FRAMEWORK`` names both by dotted path."""
