// The API's reference at /docs: Swagger UI (shipped in the package, actors/http/ui/swagger/)
// drawn from this server's own OpenAPI document. Nothing is fetched from elsewhere: no
// validator badge, no remote configuration.
"use strict";

window.ui = SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  validatorUrl: null,
  deepLinking: true,
  queryConfigEnabled: false,
});
