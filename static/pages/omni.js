// The entry module of /omni.html (an inline script would need 'unsafe-inline' in the CSP).
import { mountDuplexPage } from "/static/duplex/ui/duplex-page.js";
mountDuplexPage({ app: "Omni (camera)", appId: "omni", withCamera: true });
