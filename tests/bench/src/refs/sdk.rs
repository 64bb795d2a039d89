//! The rmcp reference: the official Rust SDK's Streamable HTTP server in stateless mode with
//! JSON responses, serving the five text tools (each echoes its `message`), the 1 MiB resource
//! (read from its file on every `resources/read`, as the platform does) and `server/discover`.
//! Unlike the platform it does not validate arguments against the input schema.

use std::path::PathBuf;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, ListToolsResult,
    PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, ResourceContents,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};

use crate::catalog;

pub async fn run(resource: PathBuf) -> anyhow::Result<()> {
    let handler = Reference { tools: Arc::new(tools()), resource: Arc::new(resource) };
    let config = StreamableHttpServerConfig::default().with_legacy_session_mode(false).with_json_response(true);
    let service =
        StreamableHttpService::new(move || Ok(handler.clone()), Arc::new(LocalSessionManager::default()), config);
    super::serve("rmcp", hyper_util::service::TowerToHyperService::new(service)).await
}

fn tools() -> Vec<Tool> {
    let schema = match catalog::input_schema() {
        serde_json::Value::Object(map) => map,
        _ => serde_json::Map::new(),
    };
    let schema = Arc::new(schema);
    (0..catalog::REFERENCE_TOOLS)
        .map(|i| Tool::new(catalog::tool_name(i), catalog::tool_description(i), schema.clone()))
        .collect()
}

#[derive(Clone)]
struct Reference {
    tools: Arc<Vec<Tool>>,
    resource: Arc<PathBuf>,
}

impl ServerHandler for Reference {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_resources().build())
            .with_server_info(Implementation::new("bench", "1.0.0"))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.as_ref().clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if !self.tools.iter().any(|t| t.name == request.name) {
            return Err(ErrorData::invalid_params(format!("unknown tool {}", request.name), None));
        }
        let message = request.arguments.as_ref().and_then(|a| a.get("message")).and_then(|m| m.as_str());
        let Some(message) = message else {
            return Err(ErrorData::invalid_params("`message` (a string) is required", None));
        };
        Ok(CallToolResponse::Complete(CallToolResult::success(vec![ContentBlock::text(message)])))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        if request.uri != catalog::RESOURCE_URI {
            return Err(ErrorData::resource_not_found(format!("no resource {}", request.uri), None));
        }
        let text = tokio::fs::read_to_string(self.resource.as_ref())
            .await
            .map_err(|e| ErrorData::internal_error(format!("reading the resource: {e}"), None))?;
        let contents = ResourceContents::text(text, catalog::RESOURCE_URI);
        Ok(ReadResourceResult::new(vec![contents]).into())
    }
}
