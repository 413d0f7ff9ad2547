// The entry module of /audio_duplex.html (an inline script would need 'unsafe-inline' in the CSP).
import { mountDuplexPage } from "/static/duplex/ui/duplex-page.js";
mountDuplexPage({ app: "Audio duplex", appId: "audio_duplex" });
